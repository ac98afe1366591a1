package worker

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/toolgate/toolgate/pkg/events"
)

// beater keeps the running calls of a worker alive with one goroutine
// for all of them, instead of a goroutine and a timer per call. Every
// every (a third of the ack wait) at most, and every half of that at
// least, each call registered for at least every gets its message marked
// in progress and its claim's heartbeat refreshed: no call goes longer
// than half its ack wait without a beat. The goroutine starts with the
// first call registered and ends at the first tick that finds none (or
// when the worker stops), so that one call after another, as at one call
// in flight, does not start a goroutine and a ticker each.
type beater struct {
	w     *Worker
	every time.Duration

	mu    sync.Mutex
	calls map[*beat]struct{}
	quit  chan struct{} // closed when the last call leaves; nil when idle
}

// beat is one call kept alive.
type beat struct {
	msg   callMsg // nil for a resumed call, which has no message
	key   string
	start time.Time
	last  time.Time // guarded by beater.mu
	rev   uint64    // the claim's revision, only touched by the beating goroutine
	// decision is the gate's on the call and decidedAt when its
	// judgement began (nil, zero: not known), kept in the record.
	decision  *events.Decision
	decidedAt time.Time
}

func newBeater(w *Worker) *beater {
	return &beater{w: w, every: w.ackWait() / 3, calls: map[*beat]struct{}{}}
}

// heartbeat keeps the message (when there is one) and the claim alive
// while a call runs long. The record says running while the call has its
// message, executing for a resumed call; it keeps the gate's decision d
// (when given), so that a redelivery finding the call interrupted audits
// it as decided.
func (w *Worker) heartbeat(msg callMsg, key string, rev uint64, start time.Time, d *events.Decision, decidedAt time.Time) (stop func()) {
	b := &beat{msg: msg, key: key, start: start, last: time.Now(), rev: rev, decision: d, decidedAt: decidedAt}
	h := w.beats
	h.mu.Lock()
	h.calls[b] = struct{}{}
	if h.quit == nil {
		h.quit = make(chan struct{})
		go h.loop(h.quit)
	}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.calls, b)
		h.mu.Unlock()
	}
}

// stop ends the beating goroutine (the worker stops).
func (h *beater) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.quit != nil {
		close(h.quit)
		h.quit = nil
	}
}

func (h *beater) loop(quit chan struct{}) {
	t := time.NewTicker(h.every / 2)
	defer t.Stop()
	var due []*beat
	for {
		select {
		case <-quit:
			return
		case now := <-t.C:
			due = due[:0]
			h.mu.Lock()
			if h.quit != quit {
				h.mu.Unlock()
				return // stopped (a later loop may serve new calls)
			}
			if len(h.calls) == 0 {
				h.quit = nil // the next call starts a new loop
				h.mu.Unlock()
				return
			}
			for b := range h.calls {
				if now.Sub(b.last) >= h.every {
					b.last = now
					due = append(due, b)
				}
			}
			h.mu.Unlock()
			// The messages first: they are what an ack wait would take.
			for _, b := range due {
				if b.msg != nil {
					if err := b.msg.InProgress(); err != nil {
						h.w.log.Warn("in-progress", "err", err)
					}
				}
			}
			for _, b := range due {
				h.claim(b, now)
			}
		}
	}
}

// claim refreshes a call's claim record (a pure call has none). A call
// that ended meanwhile has moved its record on (parked, done): the stale
// revision makes the update fail, which is right.
func (h *beater) claim(b *beat, now time.Time) {
	if b.rev == 0 {
		return // a pure call, running without a record
	}
	state := stateExecuting
	if b.msg != nil {
		state = stateRunning
	}
	rec, _ := json.Marshal(record{State: state, Worker: h.w.cfg.Name, Started: b.start, Heartbeat: now, Decision: b.decision, DecidedAt: b.decidedAt})
	ctx, cancel := context.WithTimeout(context.Background(), h.every)
	defer cancel()
	if r, err := h.w.calls.Update(ctx, b.key, rec, b.rev); err == nil {
		b.rev = r
	}
}
