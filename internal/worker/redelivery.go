package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/internal/fate"
	"github.com/toolgate/toolgate/pkg/events"
)

// duplicate handles a call id that was already claimed (a redelivery, or
// the same id sent again): the stored result is published again; a claim
// whose owner stopped heartbeating is reported as interrupted (never run
// twice); a live claim is left to its owner. It returns the message's
// fate.
func (w *Worker) duplicate(msg callMsg, in *events.Call, key string) fate.Fate {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, stored := w.storedResult(ctx, in)
	entry, err := w.calls.Get(ctx, key)
	if err != nil {
		return fate.Retry(fate.Backoff(msg.NumDelivered()), fmt.Errorf("read the claim of call %s: %w", in.ID, err))
	}
	var rec record
	_ = json.Unmarshal(entry.Value(), &rec)
	if len(rec.Audit) > 0 {
		// A stopping worker could not store these audit events: they are
		// stored before the call is acked (auditwait.go).
		if err := w.replayKept(w.execCtx, rec); err != nil {
			w.log.Warn("kept audit events still not stored; the next redelivery tries again", "call_id", in.ID, "err", err)
			return fate.Retry(fate.Backoff(msg.NumDelivered()), err)
		}
		w.log.Info("duplicate call: kept audit events stored", "call_id", in.ID, "events", len(rec.Audit))
		rec.Audit = nil
		if stored {
			rec.Result = nil
		}
		if b, err := json.Marshal(rec); err == nil {
			_, _ = w.calls.Update(ctx, key, b, entry.Revision())
		}
	}
	if stored && res.Status.Final() && (rec.State == stateRunning || rec.State == stateExecuting) {
		// Its owner may have died between storing the result and storing
		// the execution event: a call is finished only with both.
		ok, err := w.auditedKeeping(msg, in, res.Tool, rec.Started)
		if err != nil {
			return fate.Retry(fate.Backoff(msg.NumDelivered()), fmt.Errorf("look up the audit of call %s: %w", in.ID, err))
		}
		if !ok {
			if time.Since(rec.Heartbeat) <= 2*w.ackWait() {
				return fate.Leave("result stored, audit not yet: owner " + rec.Worker + " may still store it")
			}
			w.log.Warn("call finished by a worker that stopped before storing its audit event; auditing it", "call_id", in.ID, "owner", rec.Worker)
			if rec.Decision != nil {
				w.recordedDecision(in, res, rec)
			}
			w.auditAfterResult(in, *res, true, nil)
			if err := w.awaitAudit(in, key, res); err != nil {
				w.leftUnaudited(msg)
				return fate.Leave("audit event kept for the next redelivery")
			}
		}
	}
	if stored {
		w.log.Info("duplicate call: republishing stored result", "call_id", in.ID, "status", res.Status)
		w.publishResult(in, *res, false)
		return fate.Ack()
	}
	if rec.State == stateDone && rec.Result != nil {
		// The result could not be published before; publish it now.
		if err := w.publish(in, *rec.Result, true, nil); err != nil {
			w.log.Error("publish kept result", "call_id", in.ID, "err", err)
			return fate.Leave("kept result still not published; the next redelivery tries again")
		}
		return fate.Ack()
	}
	if rec.State == stateCancelled {
		// Cancelled before any worker claimed it (cancel.go).
		if err := w.publish(in, w.cancelledDuplicate(in), true, nil); err != nil {
			return fate.Leave("cancelled result not published; the next redelivery tries again")
		}
		return fate.Ack()
	}
	if rec.State == stateParked {
		// Parked, but its pending result was never stored: say it again.
		w.publishResult(in, events.ResultData{CallID: in.ID, Agent: in.Agent, Tool: in.Tool, SessionID: in.Data.SessionID,
			Status: events.StatusPending, Output: "waiting for approval"}, false)
		return fate.Ack()
	}
	if time.Since(rec.Heartbeat) > 2*w.ackWait() {
		w.log.Warn("call claimed by a worker that stopped; reporting interrupted", "call_id", in.ID, "owner", rec.Worker)
		res := events.ResultData{CallID: in.ID, Agent: in.Agent, Tool: in.Tool, SessionID: in.Data.SessionID,
			Status: events.StatusInterrupted, IsError: true, Decision: rec.Decision,
			Output: fmt.Sprintf("interrupted: worker %s stopped while running this call; it is not run again", rec.Worker)}
		if rec.Decision != nil {
			// The gate's decision the record kept: the execution audit
			// event says the call was allowed, and interrupted.
			w.recordedDecision(in, &res, rec)
		}
		w.publishResult(in, res, true)
		return fate.Ack()
	}
	// The owner is alive, heartbeating this very message (this copy was
	// delivered here too, say after waiting in a pull buffer): leave it.
	// Naking it would hand it on while the owner still works on it.
	return fate.Leave("call owned by live worker " + rec.Worker)
}
