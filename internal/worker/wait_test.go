package worker

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/fate"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
)

// headedMsg is a heldMsg with headers.
type headedMsg struct {
	*heldMsg
	h nats.Header
}

func (m headedMsg) Headers() nats.Header { return m.h }

// TestFairShareOverflowWaits: where the calls stream keeps schedules, a
// call over its agent's bounds waits, whatever its deliveries: on
// average 2 s the first time, 2 s more for each wait before, at most
// 10 s, each drawn between half and one and a half times that; at the
// same bounds as a nak; one whose sequence is unreadable is kept.
func TestFairShareOverflowWaits(t *testing.T) {
	f := newFairShare(1, 2, 5, 30*time.Second, true)
	if !f.admit(call("a")) {
		t.Fatal("a's first call does not run")
	}
	for range 2 {
		if act, _, _ := f.overflow(call("a")); act != keep {
			t.Fatalf("a's call within its bound: %v", act)
		}
		f.admit(call("a"))
	}
	for _, tt := range []struct {
		requeues  string
		delivered uint64
		delay     time.Duration
	}{
		{"", 1, overflowDelay},
		{"", 5, overflowDelay}, // no delivery to spare: waits all the same
		{"1", 1, 2 * overflowDelay},
		{"3", 1, 4 * overflowDelay},
		{"4", 1, 5 * overflowDelay},
		{"40", 1, 5 * overflowDelay},
		{"-1", 1, overflowDelay},
	} {
		m := headedMsg{&heldMsg{subject: "toolgate.call.a.bash", delivered: tt.delivered}, nats.Header{HeaderRequeues: {tt.requeues}}}
		act, delay, bound := f.overflow(m)
		if act != wait || delay < tt.delay/2 || delay >= tt.delay*3/2 || bound != boundHeldCalls {
			t.Errorf("requeued %q, delivered %d: %v after %s at %q, want wait after %s ± half at %q", tt.requeues, tt.delivered, act, delay, bound, tt.delay, boundHeldCalls)
		}
	}
	if act, _, _ := f.overflow(&unreadableMsg{heldMsg{subject: "toolgate.call.a.bash"}}); act != keep {
		t.Errorf("a call of unknown sequence: %v, want keep", act)
	}
}

// unreadableMsg is a call message whose metadata cannot be read.
type unreadableMsg struct{ heldMsg }

func (m *unreadableMsg) StreamSeq() uint64 { return 0 }

// TestWaitIsOneSchedule: on a real server and the calls stream as
// provisioned, a call sent to wait is stored as one schedule on its own
// subject, which the workers consumer does not deliver, and its original
// is acked. Sent again (its worker died before the ack), the stream drops
// the second schedule as a duplicate and the original is acked all the
// same. The schedule fires onto the call's subject: the same call (data,
// CloudEvents and trace headers), marked a copy (HeaderRequeues 1, so
// claimed as any copy) with its original's id (HeaderQueuedID), though
// the server dropped its Nats-Msg-Id; the schedule is gone. Sent to wait
// in turn, the fired copy names its own sequence, counts 2 and keeps the
// original's id.
func TestWaitIsOneSchedule(t *testing.T) {
	s := testenv.StartNATS(t, "")
	_, js := s.Connect(t)
	ctx := ctxT(t)
	if err := bus.Provision(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, bus.StreamCalls)
	if err != nil {
		t.Fatal(err)
	}
	orig := &nats.Msg{Subject: "toolgate.call.alice.read", Data: []byte(`{"x":1}`),
		Header: nats.Header{events.HeaderMsgID: {"alice.c1"}, "ce-id": {"c1"}, "traceparent": {"00-abc"}}}
	if _, err := js.PublishMsg(ctx, orig); err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, bus.StreamCalls, bus.ConsumerWorkers)
	if err != nil {
		t.Fatal(err)
	}
	next := func() jsMsg { return nextCall(t, cons) }
	w := copyingWorker(js)

	m := next()
	for range 2 { // the second: after a crash before the original's ack
		if f := w.wait(m, time.Second); f.Kind != fate.KindAck {
			t.Fatalf("wait: %v, want the original acked", f)
		}
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(bus.SubjectCallWaits))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[bus.CallWaitSubject("alice", 1)]; n != 1 || len(info.State.Subjects) != 1 {
		t.Fatalf("schedules stored: %v, want one on %s", info.State.Subjects, bus.CallWaitSubject("alice", 1))
	}
	if ci, err := cons.Info(ctx); err != nil || ci.NumPending != 0 {
		t.Fatalf("workers consumer while the call waits: %+v, %v; want nothing pending", ci, err)
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}

	c := next()
	h := c.Headers()
	if c.Subject() != orig.Subject || string(c.Data()) != `{"x":1}` || h.Get("ce-id") != "c1" || h.Get("traceparent") != "00-abc" ||
		h.Get(HeaderRequeues) != "1" || h.Get(HeaderQueuedID) != "alice.c1" || !requeued(c) || queuedID(h) != "alice.c1" {
		t.Fatalf("fired copy: subject %s, headers %v, data %s", c.Subject(), h, c.Data())
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("calls stream with the fired copy delivered: %+v, %v; want it alone (the schedule gone)", info.State, err)
	}
	if f := w.wait(c, 3*time.Second); f.Kind != fate.KindAck {
		t.Fatalf("wait of the fired copy: %v", f)
	}
	seq := c.StreamSeq()
	if err := c.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	sm, err := st.GetLastMsgForSubject(ctx, bus.CallWaitSubject("alice", seq))
	if err != nil {
		t.Fatal(err)
	}
	if sm.Header.Get(events.HeaderMsgID) != strconv.FormatUint(seq, 10)+">alice.c1" || sm.Header.Get(HeaderRequeues) != "2" || sm.Header.Get(HeaderQueuedID) != "alice.c1" ||
		sm.Header.Get("Nats-Scheduler") != "" || sm.Header.Get("Nats-Schedule-Target") != orig.Subject {
		t.Fatalf("second schedule: headers %v", sm.Header)
	}
	cc := next()
	if cc.Headers().Get(HeaderRequeues) != "2" || queuedID(cc.Headers()) != "alice.c1" {
		t.Fatalf("second fired copy: headers %v", cc.Headers())
	}
}

// echoCall is agent's call id of the echo tool as the intake stores it.
func echoCall(t *testing.T, agent, id string) *nats.Msg {
	t.Helper()
	ev, err := events.NewCall(id, agent, events.CallData{Arguments: []byte(`{"text":"x"}`)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := events.Encode(events.CallSubject(agent, "echo"), ev, events.Binary)
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Set(events.HeaderMsgID, ScopedMsgID(agent, id))
	return m
}

// storedMsg is a call message as stored at seq in the calls stream.
type storedMsg struct {
	*nats.Msg
	seq uint64
}

func (m storedMsg) Subject() string      { return m.Msg.Subject }
func (m storedMsg) Headers() nats.Header { return m.Header }
func (m storedMsg) Data() []byte         { return m.Msg.Data }
func (m storedMsg) InProgress() error    { return nil }
func (m storedMsg) StreamSeq() uint64    { return m.seq }
func (m storedMsg) NumDelivered() uint64 { return 1 }

// TestCancelOfAWaitingCall: mallory's call waiting out her bounds as a
// schedule (as a worker sends it to wait) is queued to her cancellation,
// not a made-up id; once it fires it is answered cancelled, and never
// runs.
func TestCancelOfAWaitingCall(t *testing.T) {
	s := testenv.StartNATS(t, "")
	ctr := &counter{}
	startWorker(t, s.ClientURL(), testRegistry(t, ctr, nil), Config{Concurrency: 1, Bus: fastBus})
	c, _ := newClient(t, s, "mallory")
	_, js := s.Connect(t)
	ctx := ctxT(t)
	m := echoCall(t, "mallory", "w1")
	if _, err := js.PublishMsg(ctx, waitCopy(storedMsg{m, 999}, time.Now().Add(3*time.Second))); err != nil {
		t.Fatal(err)
	}
	r, err := c.Cancel(ctx, "w1")
	if err != nil || r.State != events.CancelQueued {
		t.Fatalf("cancellation of the waiting call: %+v, %v; want queued", r, err)
	}
	res, err := c.Wait(ctx, "w1")
	if err != nil || res.Status != events.StatusCancelled {
		t.Fatalf("the waiting call once fired: %+v, %v; want cancelled", res, err)
	}
	if n := ctr.get("w1"); n != 0 {
		t.Fatalf("the cancelled call ran %d times", n)
	}
}
