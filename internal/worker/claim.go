package worker

import (
	"bytes"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// claimRetryFor bounds how long a worker keeps trying to claim a call
// whose record bucket cannot answer, before handing the message back.
const claimRetryFor = 2 * time.Minute

// claim creates the call's record (the idempotency claim). While the
// bucket cannot answer (a cluster electing a new leader after a node
// died), it retries with backoff and keeps the message in progress, so
// that the wait does not spend the call's deliveries: naking each failure
// sent calls to the dead-letter stream unrun during an election. A
// claim that was stored although its answer was lost is recognised as
// this worker's own.
func (w *Worker) claim(msg jetstream.Msg, key string, rec []byte, callID string) (uint64, error) {
	gap := 250 * time.Millisecond
	deadline := time.Now().Add(claimRetryFor)
	for attempt := 0; ; attempt++ {
		rev, err := w.calls.Create(w.execCtx, key, rec)
		if errors.Is(err, jetstream.ErrKeyExists) && attempt > 0 {
			if e, gerr := w.calls.Get(w.execCtx, key); gerr == nil && bytes.Equal(e.Value(), rec) {
				return e.Revision(), nil
			}
		}
		if err == nil || errors.Is(err, jetstream.ErrKeyExists) || w.execCtx.Err() != nil || time.Now().After(deadline) {
			return rev, err
		}
		w.log.Warn("claim failed; retrying", "call_id", callID, "attempt", attempt+1, "retry_in", gap, "err", err)
		_ = msg.InProgress()
		select {
		case <-w.execCtx.Done():
			return 0, err
		case <-time.After(gap):
		}
		gap = min(2*gap, 5*time.Second)
	}
}

// retryLater hands msg back with a delay growing with its deliveries
// (1s, 2s, 4s, ... up to 30s), so a passing outage does not exhaust them.
func retryLater(msg jetstream.Msg) {
	d := time.Second
	if md, err := msg.Metadata(); err == nil {
		for i := uint64(1); i < md.NumDelivered && d < 30*time.Second; i++ {
			d *= 2
		}
	}
	_ = msg.NakWithDelay(min(d, 30*time.Second))
}
