package worker

import (
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/fate"
	"github.com/toolgate/toolgate/pkg/events"
)

// fairShare shares a worker's slots between agents. An agent runs at
// most cap calls at once; a call of an agent at its cap is held, not run,
// and runs when a call of that agent ends, agents with held calls taking
// turns (round robin). While calls are held the puller keeps asking the
// server for free slots, so the calls of other agents queued behind one
// agent's flood reach the free slots: one agent's long calls delay
// another's by at most one slot's turn.
//
// What the delivery guarantees need: a held call is kept alive at the
// server (InProgress, every third of the ack wait) and is not claimed, so
// handing it back (a nak, when the worker stops) is always safe; at most
// maxHeld calls are held (the puller stops asking beyond), so nothing
// piles up unseen. The bound is also fairness's limit: while one agent
// has more calls queued than its share plus maxHeld, calls of others
// queued behind them wait until the flood's held calls drain.
type fairShare struct {
	cap       int // calls one agent runs at once; <= 0: no cap
	maxHeld   int
	keepAlive time.Duration

	mu      sync.Mutex
	running map[string]int // agent → calls running
	held    map[string][]heldCall
	ring    []string // agents with held calls, in turn order
	nheld   int
}

type heldCall struct {
	m     deliveredMsg
	alive time.Time // last told the server it is in progress
}

// defaultAgentShare is the part of the slots one agent may hold by
// default: the rest stays free for other agents' calls.
func defaultAgentShare(concurrency int) int { return max(1, concurrency-concurrency/4) }

// heldPerSlot is how many calls a worker holds per slot at most.
const heldPerSlot = 4

func newFairShare(cap, concurrency int, ackWait time.Duration) *fairShare {
	return &fairShare{cap: cap, maxHeld: heldPerSlot * concurrency, keepAlive: ackWait / 3,
		running: map[string]int{}, held: map[string][]heldCall{}}
}

// callAgent is the agent a call message's subject names ("" when it names
// none: the handler refuses such a call, it is never held).
func callAgent(m callMsg) string {
	agent, _, err := events.ParseCallSubject(m.Subject())
	if err != nil {
		return ""
	}
	return agent
}

// admit reports whether m may run now (then it counts as running), or
// holds it until its agent's turn.
func (f *fairShare) admit(m deliveredMsg) bool {
	agent := callAgent(m)
	f.mu.Lock()
	defer f.mu.Unlock()
	if agent == "" || f.cap <= 0 || f.running[agent] < f.cap && len(f.held[agent]) == 0 {
		f.running[agent]++
		return true
	}
	if len(f.held[agent]) == 0 {
		f.ring = append(f.ring, agent)
	}
	f.held[agent] = append(f.held[agent], heldCall{m: m, alive: time.Now()})
	f.nheld++
	return false
}

// release records the end of a call of agent.
func (f *fairShare) release(agent string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running[agent]--; f.running[agent] <= 0 {
		delete(f.running, agent)
	}
}

// next takes the held call whose turn it is: the first agent in turn
// order below its cap, which then goes to the end of the order.
func (f *fairShare) next() (deliveredMsg, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, agent := range f.ring {
		if f.running[agent] >= f.cap {
			continue
		}
		q := f.held[agent]
		m := q[0].m
		f.nheld--
		f.running[agent]++
		f.ring = append(f.ring[:i:i], f.ring[i+1:]...)
		if len(q) == 1 {
			delete(f.held, agent)
		} else {
			f.held[agent] = q[1:]
			f.ring = append(f.ring, agent)
		}
		return m, true
	}
	return nil, false
}

// full reports whether as many calls are held as may be.
func (f *fairShare) full() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nheld >= f.maxHeld
}

// refresh tells the server the held calls not told for keepAlive are in
// progress, so none reaches its ack wait while held.
func (f *fairShare) refresh(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, q := range f.held {
		for i := range q {
			if now.Sub(q[i].alive) >= f.keepAlive {
				_ = q[i].m.InProgress()
				q[i].alive = now
			}
		}
	}
}

// handBack returns every held call to the server, settled by settle with
// a nak delayed by delay: the worker stops, another takes them. It returns
// how many.
func (f *fairShare) handBack(delay time.Duration, settle func(deliveredMsg, fate.Fate)) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nheld
	for _, q := range f.held {
		for _, h := range q {
			settle(h.m, fate.Retry(delay, nil))
		}
	}
	clear(f.held)
	f.ring, f.nheld = nil, 0
	return n
}
