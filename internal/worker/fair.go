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
// server for free slots, and a freed slot a held call could take goes to
// the stream's next call first if it runs (puller.ask), so the calls of
// other agents queued behind one agent's flood reach the free slots: one
// agent's long calls delay another's by at most one call's run.
//
// What the delivery guarantees need: a held call is kept alive at the
// server (InProgress, every third of the ack wait) and is not claimed, so
// handing it back (a nak, when the worker stops) is always safe. A call
// requeued or waiting as a schedule is neither: its copy is stored before
// the original is acked, and a copy and a redelivered original are both
// claimed by call id before anything runs (pure calls too), so of the two
// that a worker dying between the copy and the ack leaves, one runs and
// the other is answered as a duplicate (requeue.go, HeaderRequeues).
//
// Bounds of the held calls: at most perAgentHeld calls of one agent (the
// concurrency) and maxHeld calls of all agents (4 × the concurrency) are
// held. A call that would be held past either bound leaves the worker
// instead (overflow), and never waits unacknowledged at the server:
//
//   - Where the calls stream keeps message schedules (bus.Schedules), it
//     waits out of the workers consumer (wait.go): a copy is stored as a
//     one-time schedule on a subject no consumer filters, firing onto the
//     call's own subject after waitDelay (2 s, growing with each wait to
//     10 s), and the original is acked. A waiting call holds no slot of
//     the workers consumer's MaxAckPending (4096, shared by every worker
//     and agent), so no flood of calls past their agents' bounds, however
//     large, stops the server delivering another agent's call: an agent
//     at or above its bound delays another's call by at most one call's
//     run.
//   - Where it does not (a server that refused schedules), it goes back
//     to the stream: a nak delayed by overflowDelay times its delivery
//     count, for as long as it has deliveries to spare (all of
//     MaxDeliver but runDeliveries, which stay for its run, a retry and
//     a hand-back), then is requeued (requeue.go): a copy at the tail of
//     the stream with a fresh delivery count, the original acked. A
//     nak-delayed call counts against MaxAckPending while it waits, so
//     there a flood of more calls than that, all past their agents'
//     bounds, stops the server delivering anyone's call for the few
//     seconds its calls take to go back or to the tail, each time the
//     server reaches them.
//
// Neither bound ever stops the puller: it keeps asking the server for its
// free slots, and a call of an agent that holds no call and runs below
// its cap takes a free slot, however many agents (or identities of one
// operator) fill the pool. What keeps the pulling from spinning: a call
// sent away waits at least overflowDelay before it is delivered again,
// longer each time.
type fairShare struct {
	cap          int // calls one agent runs at once; <= 0: no cap
	maxHeld      int
	perAgentHeld int
	bounces      uint64 // deliveries of a call that may go back with a nak
	keepAlive    time.Duration
	// schedules: calls over the bounds wait as message schedules of the
	// calls stream (wait), not as delayed naks (sendBack, requeue).
	schedules bool

	mu      sync.Mutex
	running map[string]int // agent → calls running
	held    map[string][]heldCall
	ring    []string // agents with held calls, in turn order
	nheld   int
	bounded int // held calls within their agent's bound (toward maxHeld)
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

// overflowDelay is how long a call sent back to the stream at its
// agent's bound waits there, per delivery it had (or, waiting as a
// schedule, per time it waited before: waitDelay).
const overflowDelay = 2 * time.Second

// runDeliveries are the deliveries of a call never spent on overflow:
// its run, a retry (a claim that could not be made) and a stopping
// worker's hand-back.
const runDeliveries = 3

func newFairShare(cap, concurrency, maxDeliver int, ackWait time.Duration, schedules bool) *fairShare {
	if maxDeliver <= 0 {
		maxDeliver = 5 // the workers consumer's default (bus.Config)
	}
	return &fairShare{cap: cap, maxHeld: heldPerSlot * concurrency, perAgentHeld: concurrency,
		bounces: uint64(max(0, maxDeliver-runDeliveries)), keepAlive: ackWait / 3, schedules: schedules,
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
	if len(f.held[agent]) < f.perAgentHeld {
		f.bounded++
	}
	f.held[agent] = append(f.held[agent], heldCall{m: m, alive: time.Now()})
	f.nheld++
	return false
}

// overflow says what becomes of m rather than being held, and at which
// bound: its agent holds its bound of calls already (boundHeldCalls), or
// m would be held and the pool holds its bound of calls of all agents
// (boundHeldPool). Where the calls stream keeps schedules it waits out of
// the workers consumer (wait) for delay, waitDelay. Otherwise, while m
// has a delivery to spare it goes back to the stream (sendBack) and waits
// there delay: overflowDelay per delivery it had, so a lasting flood
// comes back ever more slowly; with none to spare it is requeued
// (requeue): a copy at the tail. Either way it is never held past the
// bounds. A call that would run (its agent below its cap, none of its
// calls held) or be held within the bounds gets keep.
func (f *fairShare) overflow(m deliveredMsg) (act overflowAct, delay time.Duration, bound string) {
	agent := callAgent(m)
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case agent == "" || f.cap <= 0 || f.running[agent] < f.cap && len(f.held[agent]) == 0:
		return keep, 0, "" // it runs
	case len(f.held[agent]) >= f.perAgentHeld:
		bound = boundHeldCalls
	case f.bounded >= f.maxHeld:
		bound = boundHeldPool
	default:
		return keep, 0, "" // held within the bounds
	}
	if f.schedules {
		if m.StreamSeq() == 0 {
			return keep, 0, "" // its metadata unreadable: no sequence to name its schedule by
		}
		return wait, waitDelay(m), bound
	}
	n := m.NumDelivered()
	if n == 0 || n > f.bounces {
		// No delivery to spare (or unknown: its metadata unreadable, so
		// not its stream sequence either, which a copy's id needs).
		if n == 0 || m.StreamSeq() == 0 {
			return keep, 0, ""
		}
		return requeue, 0, bound
	}
	return sendBack, overflowDelay * time.Duration(n), bound
}

// overflowAct is what becomes of a call over its bounds (overflow).
type overflowAct int

const (
	keep     overflowAct = iota // run or held within the bounds
	sendBack                    // a nak, delayed
	requeue                     // a copy at the tail of the stream, the original acked
	wait                        // a copy stored as a schedule firing later, the original acked
)

// The bound labels of calls sent back to the stream (overflow): their
// agent held its bound of calls, or the pool held its bound of all
// agents' calls; and of calls requeued (boundRequeued), each counted
// once more under it.
const (
	boundHeldCalls = "held_calls"
	boundHeldPool  = "held_pool"
	boundRequeued  = "requeued"
)

// release records the end of a call of agent.
func (f *fairShare) release(agent string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running[agent]--; f.running[agent] <= 0 {
		delete(f.running, agent)
	}
}

// waiting reports whether a held call could run now: its agent is below
// its cap.
func (f *fairShare) waiting() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, agent := range f.ring {
		if f.running[agent] < f.cap {
			return true
		}
	}
	return false
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
		if len(q) <= f.perAgentHeld {
			f.bounded--
		}
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
	f.ring, f.nheld, f.bounded = nil, 0, 0
	return n
}
