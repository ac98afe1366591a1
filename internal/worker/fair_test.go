package worker

import (
	"cmp"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/fate"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
)

// heldMsg is a delivered call message whose settling is recorded: what
// the fair share does to the messages it holds.
type heldMsg struct {
	subject          string
	progress, nakked int
	delay            time.Duration // of the last nak
	delivered        uint64        // 0: 1
	seq              uint64        // its stream sequence; 0: 7
}

func (m *heldMsg) Subject() string                    { return m.subject }
func (m *heldMsg) Headers() nats.Header               { return nil }
func (m *heldMsg) Data() []byte                       { return nil }
func (m *heldMsg) InProgress() error                  { m.progress++; return nil }
func (m *heldMsg) StreamSeq() uint64                  { return cmp.Or(m.seq, 7) }
func (m *heldMsg) NumDelivered() uint64               { return max(m.delivered, 1) }
func (m *heldMsg) Ack() error                         { return nil }
func (m *heldMsg) NakWithDelay(d time.Duration) error { m.nakked++; m.delay = d; return nil }
func (m *heldMsg) TermWithReason(string) error        { return nil }

func call(agent string) *heldMsg { return &heldMsg{subject: "toolgate.call." + agent + ".bash"} }

func TestFairShareTakesTurns(t *testing.T) {
	f := newFairShare(2, 4, 0, 30*time.Second, false)
	a1, a2, a3, a4 := call("a"), call("a"), call("a"), call("a")
	b1, c1 := call("b"), call("c")
	for _, tt := range []struct {
		m    *heldMsg
		runs bool
	}{{a1, true}, {a2, true}, {a3, false}, {a4, false}, {b1, true}, {c1, true}} {
		if got := f.admit(tt.m); got != tt.runs {
			t.Fatalf("admit %s = %v, want %v", tt.m.subject, got, tt.runs)
		}
	}
	if _, ok := f.next(); ok || f.waiting() {
		t.Fatal("a held call ran while its agent is at its cap")
	}
	f.release("a")
	if !f.waiting() {
		t.Fatal("a held call cannot run while its agent is below its cap")
	}
	if m, ok := f.next(); !ok || m != a3 {
		t.Fatalf("after a call of a ended: %v %v, want a's first held call", m, ok)
	}
	if _, ok := f.next(); ok {
		t.Fatal("a is at its cap again")
	}
	// Held calls are kept alive, and handed back when the worker stops.
	f.refresh(time.Now().Add(11 * time.Second))
	if a4.progress != 1 || a3.progress != 0 {
		t.Errorf("in progress: held %d, running %d; want 1, 0", a4.progress, a3.progress)
	}
	var settled []fate.Fate
	settle := func(m deliveredMsg, f fate.Fate) { settled = append(settled, f); _ = (&fate.Runner{}).Settle(m, f) }
	if n := f.handBack(2*time.Second, settle); n != 1 || a4.nakked != 1 || a4.delay != 2*time.Second || f.bounded != 0 {
		t.Errorf("handed back %d, nak %d with delay %s; want 1, 1, 2s", n, a4.nakked, a4.delay)
	}
	if len(settled) != 1 || settled[0].Kind != fate.KindRetry {
		t.Errorf("held calls were settled %v, want one retry through the worker's settle", settled)
	}
}

func TestFairShareRoundRobinAndBound(t *testing.T) {
	f := newFairShare(1, 4, 0, 30*time.Second, false)
	ms := map[string][]*heldMsg{}
	for range 2 {
		for _, a := range []string{"a", "b"} {
			m := call(a)
			ms[a] = append(ms[a], m)
			f.admit(m)
		}
	}
	// a and b run one each; one each is held.
	if f.bounded != 2 {
		t.Fatalf("%d held toward the pool's bound, want 2", f.bounded)
	}
	f.release("b")
	f.release("a")
	first, _ := f.next()
	second, _ := f.next()
	if first != ms["a"][1] || second != ms["b"][1] {
		t.Fatalf("turns: %v then %v, want a's then b's", first, second)
	}
	for _, a := range []string{"a", "b", "c", "d"} {
		for range heldPerSlot + 1 { // a and b hold one past their bound
			f.admit(call(a))
		}
	}
	if f.bounded != f.maxHeld {
		t.Fatalf("%d held within their bounds, want %d (the pool's bound)", f.bounded, f.maxHeld)
	}
	if n := f.handBack(0, func(m deliveredMsg, f fate.Fate) { _ = (&fate.Runner{}).Settle(m, f) }); n != heldPerSlot*4+2 {
		t.Fatalf("handed back %d", n)
	}
}

// TestFairShareOverflowPerAgent: an agent holding its bound (the
// concurrency) sends its further calls back to the stream while they have
// deliveries to spare, each delayed by its delivery count; one with none
// to spare is requeued, never held past the bound; a call held past it
// all the same (its metadata unreadable) never counts toward the pool's
// bound: one agent alone never stops the puller.
func TestFairShareOverflowPerAgent(t *testing.T) {
	f := newFairShare(1, 4, 5, 30*time.Second, false)
	for range 1 + 4 { // one runs, four are held
		if act, _, _ := f.overflow(call("a")); act != keep {
			t.Fatal("sent back before its agent held its bound")
		}
		f.admit(call("a"))
	}
	tests := []struct {
		delivered uint64
		act       overflowAct
		delay     time.Duration
	}{{1, sendBack, overflowDelay}, {2, sendBack, 2 * overflowDelay}, {3, requeue, 0}, {5, requeue, 0}}
	for _, tt := range tests {
		act, delay, bound := f.overflow(&heldMsg{subject: "toolgate.call.a.bash", delivered: tt.delivered})
		if act != tt.act || delay != tt.delay || bound != boundHeldCalls {
			t.Errorf("delivery %d: overflow %v after %s at %q, want %v after %s", tt.delivered, act, delay, bound, tt.act, tt.delay)
		}
	}
	for range 100 {
		f.admit(&heldMsg{subject: "toolgate.call.a.bash", delivered: 3})
	}
	if f.bounded != f.perAgentHeld {
		t.Fatalf("one agent's held calls count %d toward the pool's bound, want %d", f.bounded, f.perAgentHeld)
	}
	if act, _, _ := f.overflow(call("b")); act != keep {
		t.Fatal("another agent's call was sent back")
	}
	for range 100 + 4 {
		f.release("a")
		if _, ok := f.next(); !ok {
			t.Fatal("a held call did not get its turn")
		}
	}
	if f.bounded != 0 || f.nheld != 0 {
		t.Fatalf("after every held call ran: %d counted toward the bound, %d held", f.bounded, f.nheld)
	}
}

// TestFairShareFullPoolNeverStopsOthers: four agents each at their bound
// of held calls fill the pool (sybils of one operator, say). The pool's
// bound never stops another agent's call: one that would run (its agent
// below its cap, none of its calls held) runs; one that would be held
// goes back to the stream at bound="held_pool" while it has deliveries
// to spare, waiting longer each time, and is then requeued;
// a call of an agent at its own bound goes back at bound="held_calls".
// Once a held call has run, the pool holds again.
func TestFairShareFullPoolNeverStopsOthers(t *testing.T) {
	const concurrency = 8
	f := newFairShare(1, concurrency, 5, 30*time.Second, false)
	for _, a := range []string{"a", "b", "c", "d"} {
		for range 1 + concurrency { // one runs, its bound is held
			f.admit(call(a))
		}
	}
	if !f.admit(call("e")) { // e runs one, and holds none
		t.Fatal("e's first call was held")
	}
	f.admit(call("g"))
	f.admit(&heldMsg{subject: "toolgate.call.g.bash", delivered: 3}) // no delivery to spare: held past the bound
	if f.bounded != 4*concurrency+1 || f.bounded < f.maxHeld {
		t.Fatalf("%d held toward the pool's bound of %d, want it full", f.bounded, f.maxHeld)
	}
	tests := []struct {
		name      string
		agent     string
		delivered uint64
		bound     string
		delay     time.Duration
	}{
		{"an agent below its cap holding none runs", "f", 1, "", 0},
		{"even at its last delivery", "f", 5, "", 0},
		{"a call naming no agent runs", "", 1, "", 0},
		{"an agent at its cap goes back", "e", 1, boundHeldPool, overflowDelay},
		{"longer on its second delivery", "e", 2, boundHeldPool, 2 * overflowDelay},
		{"requeued past the pool with no delivery to spare", "e", 3, boundHeldPool, 0},
		{"an agent below its cap holding calls goes back", "g", 1, boundHeldPool, overflowDelay},
		{"an agent at its own bound goes back at that bound", "a", 2, boundHeldCalls, 2 * overflowDelay},
		{"requeued past its bound with no delivery to spare", "a", 4, boundHeldCalls, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &heldMsg{subject: "toolgate.call." + tt.agent + ".bash", delivered: tt.delivered}
			if tt.agent == "" {
				m.subject = "x"
			}
			want := keep
			switch {
			case tt.bound != "" && tt.delay == 0:
				want = requeue
			case tt.bound != "":
				want = sendBack
			}
			act, delay, bound := f.overflow(m)
			if act != want || bound != tt.bound || delay != tt.delay {
				t.Errorf("overflow: %v at %q after %s, want %v at %q after %s", act, bound, delay, want, tt.bound, tt.delay)
			}
		})
	}
	// g's call ends: its held call runs; then a's: the pool holds again.
	for _, a := range []string{"g", "a"} {
		f.release(a)
		if m, ok := f.next(); !ok || callAgent(m) != a {
			t.Fatalf("after %s's call ended: %v %v, want its held call", a, m, ok)
		}
	}
	if act, _, _ := f.overflow(call("e")); act != keep {
		t.Fatalf("a call was sent back while the pool had room (%d of %d held)", f.bounded, f.maxHeld)
	}
}

func TestFairShareWithoutCapRunsAll(t *testing.T) {
	f := newFairShare(-1, 4, 0, time.Second, false)
	for range 10 {
		if !f.admit(call("a")) {
			t.Fatal("held a call with no cap")
		}
	}
	// A subject naming no agent is never held.
	g := newFairShare(1, 4, 0, time.Second, false)
	if !g.admit(&heldMsg{subject: "x"}) || !g.admit(&heldMsg{subject: "x"}) {
		t.Fatal("held a call without an agent")
	}
}

// TestHeldCallsStayAliveAndOthersRun: on a real server, one agent's flood
// holds its share of the slots, its further calls are held (up to the
// bound) without ever reaching their ack wait, and another agent's call
// takes the free slot.
func TestHeldCallsStayAliveAndOthersRun(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	started := make(chan string, 64)
	reg := testRegistry(t, &ctr, started)
	const slots, share, calls = 4, 3, 12
	startWorker(t, s.ClientURL(), reg, Config{Name: "w1", Concurrency: slots, ShutdownGrace: time.Millisecond, Bus: fastBus})
	flood, nc := newClient(t, s, "flood")
	for i := range calls {
		if _, err := flood.Submit(ctxT(t), "sleep", map[string]any{"ms": 600000}, client.WithID(fmt.Sprintf("flood-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for range share {
		select {
		case <-started:
		case <-ctxT(t).Done():
			t.Fatal("the flood did not take its share")
		}
	}
	other, _ := newClient(t, s, "other")
	if _, err := other.Submit(ctxT(t), "sleep", map[string]any{"ms": 600000}, client.WithID("other-1")); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-started:
		if id != "other-1" {
			t.Fatalf("%s started, want other-1", id)
		}
	case <-ctxT(t).Done():
		t.Fatal("the other agent's call never started")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctxT(t), bus.StreamCalls, bus.ConsumerWorkers)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctxT(t), bus.StreamCalls)
	if err != nil {
		t.Fatal(err)
	}
	// Several ack waits (2s) pass: running and held calls are kept alive,
	// and at most heldPerSlot per slot are held; the calls over the bound
	// wait in the stream as schedules or queued (a copy and its original
	// both, for the instant between the copy's store and the original's
	// ack): none is lost.
	for range 3 {
		time.Sleep(2500 * time.Millisecond)
		info, err := cons.Info(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		sinfo, err := st.Info(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if info.NumRedelivered != 0 || info.NumAckPending > (1+heldPerSlot)*slots || sinfo.State.Msgs < calls+1 {
			t.Fatalf("redelivered %d, delivered unacked %d, pending %d, in the stream %d", info.NumRedelivered, info.NumAckPending, info.NumPending, sinfo.State.Msgs)
		}
	}
	if _, runs := ctr.total(); runs != slots {
		t.Fatalf("%d executions, want %d", runs, slots)
	}
}

// TestHandBackDelay: a stopping worker's hand-back waits until the last
// of its open pull requests has ended, plus the margin; with none open,
// or all ended, it does not wait.
func TestHandBackDelay(t *testing.T) {
	now := time.Now()
	cases := []struct {
		name     string
		reqs     []time.Time
		min, max time.Duration
	}{
		{"no request open", nil, 0, 0},
		{"every request ended", []time.Time{now.Add(-time.Second)}, 0, 0},
		{"the last request's end", []time.Time{now.Add(time.Second), now.Add(30 * time.Second), now.Add(-time.Second)}, 29 * time.Second, 30*time.Second + handBackMargin},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &puller{reqs: map[string]*pullReq{}}
			for i, d := range tc.reqs {
				p.reqs[fmt.Sprint(i)] = &pullReq{n: 1, deadline: d}
			}
			if d := p.handBackDelay(); d < tc.min || d > tc.max {
				t.Errorf("delay %s, want between %s and %s", d, tc.min, tc.max)
			}
		})
	}
}
