package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestCallsStreamKeepsWaitingCallsAsSchedules documents what the workers
// rely on when a call over its agent's bounds waits as a message
// schedule of the calls stream, on the real server:
//   - a calls stream provisioned before schedules is updated in place;
//   - a schedule is deduplicated by its Nats-Msg-Id, and while it waits
//     the workers consumer has nothing pending (no MaxAckPending slot);
//   - it fires once onto its target, the call's subject, with the call's
//     headers and data but its Nats-Msg-Id (the server drops it) and the
//     schedule headers (Nats-Schedule*), and a Nats-Scheduler naming the
//     schedule; the schedule itself is then gone from the stream;
//   - with schedules, roll-ups are on: a message with Nats-Rollup: all
//     purges every call queued, which is why the intake refuses every
//     Nats-* header but Nats-Msg-Id from an agent.
func TestCallsStreamKeepsWaitingCallsAsSchedules(t *testing.T) {
	s := testenv.StartNATS(t, "")
	_, js := s.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	legacy := bus.Config{}.Streams()[0]
	legacy.Subjects, legacy.AllowMsgSchedules, legacy.AllowRollup = []string{events.SubjectCalls}, false, false
	if _, err := js.CreateStream(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	before := schedule(time.Now())
	before.Subject = events.CallSubject("alice", "wait")
	if _, err := js.PublishMsg(ctx, before); !errors.Is(err, jetstream.ErrMessageSchedulesDisabled) {
		t.Fatalf("a schedule on the stream before: %v, want refused", err)
	}
	if err := bus.Provision(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, bus.StreamCalls)
	if err != nil {
		t.Fatal(err)
	}
	if !bus.Schedules(st.CachedInfo().Config) {
		t.Fatalf("calls stream not updated to keep schedules: %+v", st.CachedInfo().Config)
	}

	at := time.Now().Add(2 * time.Second)
	for i, dup := range []bool{false, true} {
		ack, err := js.PublishMsg(ctx, schedule(at))
		if err != nil || ack.Duplicate != dup {
			t.Fatalf("schedule %d: %+v, %v; want duplicate %v", i, ack, err, dup)
		}
	}
	cons, err := js.Consumer(ctx, bus.StreamCalls, bus.ConsumerWorkers)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := cons.Info(ctx); err != nil || info.NumPending+uint64(info.NumAckPending) != 0 {
		t.Fatalf("workers consumer while the call waits: %+v, %v; want nothing pending", info, err)
	}
	msgs, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var fired []jetstream.Msg
	for m := range msgs.Messages() {
		fired = append(fired, m)
	}
	if len(fired) != 1 {
		t.Fatalf("%d calls fired, want 1 (%v)", len(fired), msgs.Error())
	}
	m := fired[0]
	h := m.Headers()
	if m.Subject() != events.CallSubject("alice", "read") || string(m.Data()) != "call" || h.Get("Toolgate-Requeues") != "1" ||
		h.Get("ce-id") != "c1" || h.Get(nats.MsgIdHdr) != "" || h.Get("Nats-Schedule") != "" ||
		h.Get("Nats-Schedule-Target") != "" || h.Get("Nats-Scheduler") != bus.CallWaitSubject("alice", 7) {
		t.Fatalf("fired call: %s %q %v", m.Subject(), m.Data(), h)
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("calls stream after the fired call was acked: %+v, %v; want empty", info.State, err)
	}

	// Roll-ups, on with schedules: one message purges every call.
	for _, a := range []string{"alice", "bob"} {
		if _, err := js.Publish(ctx, events.CallSubject(a, "read"), []byte("call")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: events.CallSubject("mallory", "read"), Header: nats.Header{"Nats-Rollup": {"all"}}}); err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("calls stream after a roll-up of all: %+v, %v; want only the roll-up", info.State, err)
	}
}

// schedule is alice's read requeued from stream sequence 7, waiting
// until at.
func schedule(at time.Time) *nats.Msg {
	return &nats.Msg{Subject: bus.CallWaitSubject("alice", 7), Data: []byte("call"), Header: nats.Header{
		nats.MsgIdHdr: {"7>alice.c1"}, "Toolgate-Requeues": {"1"}, "ce-id": {"c1"},
		"Nats-Schedule": {"@at " + at.UTC().Format(time.RFC3339Nano)}, "Nats-Schedule-Target": {events.CallSubject("alice", "read")},
	}}
}
