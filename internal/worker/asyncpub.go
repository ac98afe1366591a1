package worker

import (
	"context"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/pkg/events"
)

// Domain events (policy violations, registry and policy changes) are
// published asynchronously: a call does not wait for them to be stored
// (audit records likewise, retried and counted by publishAudit). A publish that fails or is not acknowledged in time is
// counted and retried in the background with the same Nats-Msg-Id (so a
// retry can never store it twice); one that fails every attempt is counted
// as lost and logged as an error. Shutdown waits for the outstanding
// acknowledgements and retries. Results are not handled here: publish
// awaits each result's acknowledgement itself before the call is acked.

// EventStats counts event publishes that were not acknowledged at once.
type EventStats struct {
	// Failed is how many event publishes failed or timed out and were retried.
	Failed int64
	// Lost is how many failed every retry (each was logged as an error).
	Lost int64
}

// EventStats returns the worker's counts of failed and lost event publishes.
func (w *Worker) EventStats() EventStats {
	return EventStats{Failed: w.eventsFailed.Load(), Lost: w.eventsLost.Load()}
}

// asyncFailed is the JetStream context's handler of failed asynchronous
// publishes.
func (w *Worker) asyncFailed(_ jetstream.JetStream, m *nats.Msg, err error) {
	if !strings.HasPrefix(m.Subject, events.Prefix+".") || strings.HasPrefix(m.Subject, events.Prefix+".result.") ||
		strings.HasPrefix(m.Subject, events.Prefix+".audit.") {
		return // results, claims and audit events: their publishers await them and retry
	}
	w.eventFailed(m, err)
}

// eventFailed counts a failed event publish and retries it in the
// background.
func (w *Worker) eventFailed(m *nats.Msg, err error) {
	w.eventsFailed.Add(1)
	w.log.Warn("publish event: retrying", "subject", m.Subject, "id", m.Header.Get(nats.MsgIdHdr), "err", err)
	w.retrying.Add(1)
	go func() {
		defer w.retrying.Done()
		for attempt, wait := 1, 250*time.Millisecond; attempt < publishAttempts; attempt, wait = attempt+1, wait*2 {
			time.Sleep(wait)
			ctx, cancel := context.WithTimeout(context.Background(), w.cfg.publishTimeout)
			_, err = w.js.PublishMsg(ctx, m)
			cancel()
			if err == nil {
				return
			}
		}
		w.eventsLost.Add(1)
		w.log.Error("event lost: not stored after retries", "subject", m.Subject, "id", m.Header.Get(nats.MsgIdHdr), "err", err)
	}()
}

// drainEvents waits, within grace, for the outstanding asynchronous
// publishes to be acknowledged and for the retries to end.
func (w *Worker) drainEvents(grace time.Duration) {
	done := make(chan struct{})
	go func() {
		select {
		case <-w.js.PublishAsyncComplete():
		case <-time.After(grace):
		}
		w.retrying.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(grace):
		w.log.Warn("stopping with event publishes still unacknowledged", "pending", w.js.PublishAsyncPending())
	}
}
