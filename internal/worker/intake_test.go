package worker

import (
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
)

// intakeWorker is a worker with only what its intake uses, on its own
// connection to s, with no quota of queued calls (queued_test.go and
// test/queued_quota_e2e_test.go test it).
func intakeWorker(t *testing.T, s *testenv.Server) *Worker {
	nc, _ := s.Connect(t)
	return &Worker{nc: nc, log: slog.New(slog.NewTextHandler(io.Discard, nil)), queued: &queuedQuota{max: -1}}
}

// serveIntake starts w's intake, subscribed at the server once it returns.
func serveIntake(t *testing.T, w *Worker) func() {
	stop, err := w.serveIntake()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return stop
}

// TestIntakeRelaysEachAcknowledgement: calls of two agents, many in
// flight at once with the same ids, each get the stream's own
// acknowledgement through the intake; each agent's ids are deduplicated
// among its own calls only, and the stored id is the scoped one.
func TestIntakeRelaysEachAcknowledgement(t *testing.T) {
	s := testenv.StartNATS(t, t.TempDir())
	_, js := s.Connect(t)
	ctx := ctxT(t)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "CALLS", Subjects: []string{events.Prefix + ".call.>"}})
	if err != nil {
		t.Fatal(err)
	}
	stop := serveIntake(t, intakeWorker(t, s))
	defer stop()

	const perAgent = 150
	publish := func(agent, id string) (*jetstream.PubAck, error) {
		m := nats.NewMsg(identity.IntakePrefix + events.CallSubject(agent, "read"))
		m.Header.Set(events.HeaderMsgID, id)
		m.Data = []byte(`{}`)
		return js.PublishMsg(ctx, m)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*perAgent)
	for _, agent := range []string{"alice", "bob"} {
		for i := range perAgent {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ack, err := publish(agent, fmt.Sprint("id", i))
				if err == nil && (ack.Stream != "CALLS" || ack.Duplicate) {
					t.Errorf("%s's call %d: acknowledged %+v", agent, i, ack)
				}
				errs <- err
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	ack, err := publish("alice", "id0")
	if err != nil || !ack.Duplicate {
		t.Fatalf("alice's id again: %+v, %v; want a duplicate", ack, err)
	}
	if _, err := publish("bob", "last"); err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2*perAgent+1 {
		t.Fatalf("stored %d calls, want %d", info.State.Msgs, 2*perAgent+1)
	}
	got, err := st.GetLastMsgForSubject(ctx, events.CallSubject("bob", "read"))
	if err != nil {
		t.Fatal(err)
	}
	if id := got.Header.Get(events.HeaderMsgID); id != ScopedMsgID("bob", "last") {
		t.Fatalf("stored Nats-Msg-Id %q", id)
	}
}

// TestIntakeGivesUpAnUnansweredCall: a call nothing stores (no stream:
// the server's no-responders status) and one whose store never answers
// are given up, their slots freed, and the agent is answered nothing (it
// publishes again).
func TestIntakeGivesUpAnUnansweredCall(t *testing.T) {
	s := testenv.StartNATS(t, t.TempDir())
	agent, _ := s.Connect(t)
	r, err := newIntakeRelay(intakeWorker(t, s))
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	answers, err := agent.SubscribeSync("agent.reply")
	if err != nil {
		t.Fatal(err)
	}
	silent, err := agent.SubscribeSync(events.CallSubject("alice", "silent"))
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"nostream", "silent"} {
		m := nats.NewMsg(identity.IntakePrefix + events.CallSubject("alice", tool))
		m.Reply = "agent.reply"
		r.forward(m, events.CallSubject("alice", tool), "alice")
	}
	if _, err := silent.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("the silent store got nothing: %v", err)
	}
	pending := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.pending)
	}
	for end := time.Now().Add(10 * time.Second); pending() != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d calls pending, want the silent one's only", pending())
		}
	}
	r.giveUp(time.Now().Add(time.Second))
	if n, s := pending(), len(r.slots); n != 0 || s != 0 {
		t.Fatalf("after giving up: %d pending, %d slots taken", n, s)
	}
	if m, err := answers.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("the agent was answered %q", m.Data)
	}
}

// TestIntakeHoldsNoGoroutinePerCall: calls waiting for the store's answer
// hold no goroutine each (the intake forwards them from its own
// subscription and relays the answers from one reply subscription).
func TestIntakeHoldsNoGoroutinePerCall(t *testing.T) {
	s := testenv.StartNATS(t, t.TempDir())
	agent, _ := s.Connect(t)
	store, _ := s.Connect(t)
	silent, err := store.SubscribeSync(events.Prefix + ".call.>") // takes calls, never answers
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Flush(); err != nil {
		t.Fatal(err)
	}
	stop := serveIntake(t, intakeWorker(t, s))
	defer stop()
	before := runtime.NumGoroutine()
	const calls = 200
	for i := range calls {
		m := nats.NewMsg(identity.IntakePrefix + events.CallSubject("alice", "read"))
		m.Reply = agent.NewInbox()
		m.Header.Set(events.HeaderMsgID, fmt.Sprint("id", i))
		if err := agent.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	taken := make([]*nats.Msg, 0, calls)
	for i := range calls {
		m, err := silent.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("call %d not forwarded: %v", i, err)
		}
		taken = append(taken, m)
	}
	if grown := runtime.NumGoroutine() - before; grown > calls/10 {
		t.Errorf("%d calls waiting for the store hold %d more goroutines", calls, grown)
	}
	for _, m := range taken { // answered now: the intake stops at once
		if err := m.Respond([]byte(`{"stream":"CALLS","seq":1}`)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestScopeMsgID: every id line an agent's message carries is scoped by
// the agent, so no line the stream might read names another agent's id.
func TestScopeMsgID(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{"one", []string{"c1"}, []string{"ann.c1"}},
		{"two lines", []string{"c1", "bob.c2"}, []string{"ann.c1", "ann.bob.c2"}},
		{"an empty line first", []string{"", "c2"}, []string{"", "ann.c2"}},
		{"none", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := nats.Header{}
			if tt.in != nil {
				h[events.HeaderMsgID] = append([]string(nil), tt.in...)
			}
			scopeMsgID(h, "ann")
			if got := h[events.HeaderMsgID]; !slices.Equal(got, tt.want) {
				t.Fatalf("scoped %q = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestIntakeRefusalsWithoutReplyLoggedOncePerSecond: an agent's messages
// refused without a reply subject (a reserved header, no one to answer)
// do not flood the worker's log: 200 of them within a second make one
// line.
func TestIntakeRefusalsWithoutReplyLoggedOncePerSecond(t *testing.T) {
	s := testenv.StartNATS(t, t.TempDir())
	w := intakeWorker(t, s)
	var logged syncBuffer
	w.log = slog.New(slog.NewTextHandler(&logged, nil))
	defer serveIntake(t, w)()
	nc, _ := s.Connect(t)
	refused := func() *nats.Msg {
		m := nats.NewMsg(identity.IntakePrefix + events.CallSubject("ann", "read"))
		m.Header.Set("Nats-Rollup", "all")
		return m
	}
	for range 200 {
		if err := nc.PublishMsg(refused()); err != nil {
			t.Fatal(err)
		}
	}
	// The intake handles its messages in order: once this one is
	// answered (refused too, to its reply subject), the 200 were handled.
	if _, err := nc.RequestMsg(refused(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := logged.Count("intake: refused"); n < 1 || n > 2 {
		t.Fatalf("200 refused messages logged %d times, want 1 (2 if a second turned)", n)
	}
}

// syncBuffer is a log sink safe for the intake's goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b = append(b.b, p...)
	return len(p), nil
}

// Count is how many times s occurs in what was written.
func (b *syncBuffer) Count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(string(b.b), s)
}
