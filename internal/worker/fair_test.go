package worker

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// heldMsg is a delivered call message whose settling is recorded: what
// the fair share does to the messages it holds.
type heldMsg struct {
	subject          string
	progress, nakked int
}

func (m *heldMsg) Subject() string                  { return m.subject }
func (m *heldMsg) Headers() nats.Header             { return nil }
func (m *heldMsg) Data() []byte                     { return nil }
func (m *heldMsg) InProgress() error                { m.progress++; return nil }
func (m *heldMsg) StreamSeq() uint64                { return 0 }
func (m *heldMsg) NumDelivered() uint64             { return 1 }
func (m *heldMsg) Ack() error                       { return nil }
func (m *heldMsg) NakWithDelay(time.Duration) error { m.nakked++; return nil }
func (m *heldMsg) TermWithReason(string) error      { return nil }

func call(agent string) *heldMsg { return &heldMsg{subject: "toolgate.call." + agent + ".bash"} }

func TestFairShareTakesTurns(t *testing.T) {
	f := newFairShare(2, 4, 30*time.Second)
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
	if _, ok := f.next(); ok {
		t.Fatal("a held call ran while its agent is at its cap")
	}
	f.release("a")
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
	if n := f.handBack(); n != 1 || a4.nakked != 1 || f.full() {
		t.Errorf("handed back %d, nak %d", n, a4.nakked)
	}
}

func TestFairShareRoundRobinAndBound(t *testing.T) {
	f := newFairShare(1, 4, 30*time.Second)
	ms := map[string][]*heldMsg{}
	for range 2 {
		for _, a := range []string{"a", "b"} {
			m := call(a)
			ms[a] = append(ms[a], m)
			f.admit(m)
		}
	}
	// a and b run one each; one each is held.
	if f.full() {
		t.Fatal("2 held of 4 is not full")
	}
	f.release("b")
	f.release("a")
	first, _ := f.next()
	second, _ := f.next()
	if first != ms["a"][1] || second != ms["b"][1] {
		t.Fatalf("turns: %v then %v, want a's then b's", first, second)
	}
	for range 4 {
		f.admit(call("a"))
	}
	if !f.full() {
		t.Fatal("4 held of 4: the puller must stop asking")
	}
	if n := f.handBack(); n != 4 {
		t.Fatalf("handed back %d", n)
	}
}

func TestFairShareWithoutCapRunsAll(t *testing.T) {
	f := newFairShare(-1, 4, time.Second)
	for range 10 {
		if !f.admit(call("a")) {
			t.Fatal("held a call with no cap")
		}
	}
	// A subject naming no agent is never held.
	g := newFairShare(1, 4, time.Second)
	if !g.admit(&heldMsg{subject: "x"}) || !g.admit(&heldMsg{subject: "x"}) {
		t.Fatal("held a call without an agent")
	}
}
