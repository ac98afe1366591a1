package worker

import (
	"sync"
	"time"

	"github.com/toolgate/toolgate/pkg/eventsig"
)

// groupSigner signs the final publishes of concurrent calls with one
// signature (group commit): the first call to sign leads, waits while
// other calls are on their way to their signature (begun: decoded and
// judged, or run; not while their tool runs), or while calls come to
// their signature closer together than linger (a loaded worker: the
// last gap between two and the recent average both shorter; pace), at
// most linger, then signs every queued call's events with one
// eventsig.SignBatch and hands each its signatures. A call alone, or
// after a pause, waits for nothing. A failed signature fails the calls
// of its batch. The callers do the work; it starts no goroutine.
type groupSigner struct {
	sign   eventsig.SignBatch
	linger time.Duration
	pace   time.Duration // calls closer together than this: loaded

	mu      sync.Mutex
	calls   map[string]bool // begun, not queued yet, by call key
	queue   []*signReq      // waiting to be signed, in arrival order
	leading bool            // a leader is gathering or signing
	arrived chan struct{}   // a request queued while a leader gathers
	// last is when a call last came to its signature; gap the time
	// before it, avg a moving average of the gaps (0: none yet).
	last     time.Time
	gap, avg time.Duration
}

// signReq is one call's events waiting for their signatures.
type signReq struct {
	inputs [][]byte
	sigs   []string
	signer string
	err    error
	lead   bool          // set before done: the caller leads the next batch
	done   chan struct{} // closed when signed, or when it is to lead
}

// signLinger bounds how long a leader waits for the other calls on their
// way to their signature (BENCHMARKS.md "Concurrent calls share one
// signature").
const signLinger = 200 * time.Microsecond

// newGroupSigner returns the groupSigner of sign; nil when sign is (no
// signer: nothing is signed).
func newGroupSigner(sign eventsig.SignBatch, linger time.Duration) *groupSigner {
	if sign == nil {
		return nil
	}
	return &groupSigner{sign: sign, linger: linger, pace: linger, arrived: make(chan struct{}, 1), calls: map[string]bool{}}
}

// begin records a call on its way to a final publish, by its key; a
// leader waits for it (at most linger) until it signs or is done.
func (g *groupSigner) begin(key string) {
	g.mu.Lock()
	g.calls[key] = true
	g.mu.Unlock()
}

// done records that the call key, if begun and not signing yet, will not
// sign: it is not waited for.
func (g *groupSigner) done(key string) {
	g.mu.Lock()
	if g.calls[key] {
		delete(g.calls, key)
		if g.leading {
			g.notify()
		}
	}
	g.mu.Unlock()
}

// notify wakes the gathering leader; g.mu held.
func (g *groupSigner) notify() {
	select {
	case g.arrived <- struct{}{}:
	default:
	}
}

// signTogether signs inputs (one begun call's events), with the events of
// the other calls signing now, and returns their signatures as an
// eventsig.SignBatch does.
func (g *groupSigner) signTogether(key string, inputs [][]byte) ([]string, string, error) {
	r := &signReq{inputs: inputs, done: make(chan struct{})}
	now := time.Now()
	g.mu.Lock()
	if !g.last.IsZero() {
		g.gap = now.Sub(g.last)
		if g.avg == 0 {
			g.avg = g.gap
		} else {
			g.avg = (3*g.avg + g.gap) / 4
		}
	}
	g.last = now
	delete(g.calls, key)
	g.queue = append(g.queue, r)
	if g.leading {
		g.notify()
		g.mu.Unlock()
		<-r.done
		if !r.lead {
			return r.sigs, r.signer, r.err
		}
		g.mu.Lock()
	}
	g.leading = true
	g.lead()
	return r.sigs, r.signer, r.err
}

// lead gathers a batch (the queue, waiting at most linger for the calls
// begun and not queued yet), signs it and hands the lead on to the first
// request queued meanwhile. g.mu held on entry, not on return.
func (g *groupSigner) lead() {
	if len(g.calls) > 0 || g.loaded() {
		t := time.NewTimer(g.linger)
		for gathering := true; gathering && (len(g.calls) > 0 || g.loaded()) && batchInputs(g.queue) < eventsig.MaxBatch/2; {
			g.mu.Unlock()
			select {
			case <-g.arrived:
			case <-t.C:
				gathering = false
			}
			g.mu.Lock()
		}
		t.Stop()
	}
	n, size := 0, 0
	for n < len(g.queue) && size+len(g.queue[n].inputs) <= eventsig.MaxBatch {
		size += len(g.queue[n].inputs)
		n++
	}
	if n == 0 { // one call's events over MaxBatch: SignBatch says so
		n, size = 1, len(g.queue[0].inputs)
	}
	batch := make([]*signReq, n)
	copy(batch, g.queue)
	g.queue = append(g.queue[:0], g.queue[n:]...)
	g.mu.Unlock()

	g.signBatch(batch, size)

	g.mu.Lock()
	if len(g.queue) > 0 {
		next := g.queue[0]
		next.lead = true
		close(next.done)
	} else {
		g.leading = false
	}
	g.mu.Unlock()
	for _, r := range batch[1:] {
		close(r.done)
	}
}

// signBatch signs the events of batch (size of them) with one signature
// and sets each request's signatures; batch[0] is the leader's own.
func (g *groupSigner) signBatch(batch []*signReq, size int) {
	if len(batch) == 1 {
		r := batch[0]
		r.sigs, r.signer, r.err = g.sign(r.inputs)
		return
	}
	inputs := make([][]byte, 0, size)
	for _, r := range batch {
		inputs = append(inputs, r.inputs...)
	}
	sigs, signer, err := g.sign(inputs)
	for _, r := range batch {
		r.signer, r.err = signer, err
		if err == nil {
			r.sigs, sigs = sigs[:len(r.inputs):len(r.inputs)], sigs[len(r.inputs):]
		}
	}
}

// loaded reports whether calls come to their signature closer together
// than pace: the last gap and the moving average both shorter (g.mu
// held). Another call is then likely to come while a leader waits.
func (g *groupSigner) loaded() bool {
	return g.avg > 0 && g.gap < g.pace && g.avg < g.pace
}

// batchInputs counts the events queued.
func batchInputs(q []*signReq) int {
	n := 0
	for _, r := range q {
		n += len(r.inputs)
	}
	return n
}
