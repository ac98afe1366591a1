package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/parking"
	"github.com/toolgate/toolgate/internal/telemetry"
	papproval "github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools"
)

// errResumeBusy makes the approvals manager try a resume again later.
var errResumeBusy = errors.New("call is being resumed by another worker")

// Resume continues a parked call once people decided: an approved call is
// judged again by the policy in force now and run (at most once, even when
// a worker dies mid-run), an answered clarify returns the answer, and a
// rejected or expired call gets its final result. It is safe to call again
// for a call it already finished.
func (w *Worker) Resume(ctx context.Context, p *parking.Parked, o parking.Outcome) error {
	in := &events.Call{ID: p.CallID, Agent: p.Agent, Tool: p.Tool, Mode: parseMode(p.Meta["mode"]),
		TraceParent: p.Meta["traceparent"], TraceState: p.Meta["tracestate"],
		Data: events.CallData{Arguments: p.Arguments, SessionID: p.SessionID, TimeoutMS: p.TimeoutMS,
			JudgeOnly: p.Meta["judge_only"] == "true"}}
	key := CallKey(in.Agent, in.ID)
	if err := w.replayKeptOf(ctx, key); err != nil {
		return err
	}
	if r, ok := w.storedResult(ctx, in); ok && r.Status.Final() {
		return nil // finished before; the manager only lost track
	}
	if e, err := w.calls.Get(ctx, key); err == nil {
		var rec record
		if json.Unmarshal(e.Value(), &rec) == nil && rec.State == stateDone && rec.Result != nil {
			a := o.Audit()
			return w.finish(withEdits(in, p, o, a), key, *rec.Result, a, nil) // ran; only its result is missing
		}
	}
	ctx, done := w.resumeSpan(ctx, in, p.Meta[telemetry.MetaSpan], string(o.Status), o.Approvers)
	defer done()
	w.auditPeople(ctx, in, p, o)
	appr := o.Audit()
	in = withEdits(in, p, o, appr) // approved with changes: run the edited arguments (edit.go)
	res := events.ResultData{CallID: in.ID, Agent: in.Agent, Tool: in.Tool, SessionID: in.Data.SessionID}
	d := wireDecision(p.Decision)
	d.Approvers = o.Approvers
	res.Decision = d
	start := time.Now()
	who := strings.Join(o.Approvers, ", ")
	switch o.Status {
	case papproval.Approved:
		var err error
		res, err = w.runApproved(ctx, in, max(len(o.Approvers), 1))
		if err != nil {
			return err
		}
	case papproval.Answered:
		res.Status, res.Output = events.StatusOK, o.Answer
		res.Metadata = map[string]any{"answered_by": o.Approvers, "default_answer_used": o.DefaultAnswer}
	case papproval.Rejected:
		res.Status, res.IsError = events.StatusRejected, true
		res.Output = fmt.Sprintf("rejected by %s: %s", who, o.Reason)
		if who == "" {
			res.Output = "rejected: " + o.Reason
		}
	case papproval.Expired:
		res.Status, res.IsError = events.StatusExpired, true
		res.Output = "expired: no decision before " + p.ExpiresAt.UTC().Format(time.RFC3339)
		if o.Reason != "" {
			res.Output += " (" + o.Reason + ")"
		}
	case papproval.Cancelled:
		res.Status, res.IsError = events.StatusCancelled, true
		res.Output = "cancelled while waiting for approval: the approval request was withdrawn"
		if o.Reason != "" {
			res.Output += " (" + o.Reason + ")"
		}
	default:
		return fmt.Errorf("resume %s: unknown outcome %q", p.CallID, o.Status)
	}
	if res.Decision != nil {
		res.Decision.Approvers = o.Approvers
	}
	res.DurationMS = tools.Elapsed(start)
	return w.finish(in, key, res, appr, nil)
}

// runApproved claims the approved call in the calls bucket and runs it
// through the pipeline with Approved set, so the gate judges it again: a
// call denied meanwhile is denied, an ask no longer parks it unless it now
// needs more than the approvals distinct people signed.
func (w *Worker) runApproved(ctx context.Context, in *events.Call, approvals int) (events.ResultData, error) {
	key := CallKey(in.Agent, in.ID)
	now := time.Now()
	rec, _ := json.Marshal(record{State: stateExecuting, Worker: w.cfg.Name, Started: now, Heartbeat: now})
	var rev uint64
	entry, err := w.calls.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		rev, err = w.calls.Create(ctx, key, rec)
	case err == nil:
		var old record
		_ = json.Unmarshal(entry.Value(), &old)
		if old.State == stateExecuting {
			if time.Since(old.Heartbeat) <= 2*w.ackWait() {
				return events.ResultData{}, errResumeBusy
			}
			// The worker that ran it died mid-run: never run it twice.
			return events.ResultData{CallID: in.ID, Agent: in.Agent, Tool: in.Tool, SessionID: in.Data.SessionID,
				Status: events.StatusInterrupted, IsError: true,
				Output: fmt.Sprintf("interrupted: worker %s stopped while running this approved call; it is not run again", old.Worker)}, nil
		}
		rev, err = w.calls.Update(ctx, key, rec, entry.Revision())
	}
	if err != nil {
		return events.ResultData{}, fmt.Errorf("claim approved call %s: %w", in.ID, err)
	}
	stop := w.heartbeat(nil, key, rev, now, nil, time.Time{}) // judged again below
	defer stop()
	c := &tools.Call{ID: in.ID, Agent: in.Agent, SessionID: in.Data.SessionID, Name: in.Tool, Arguments: in.Data.Arguments,
		Timeout: time.Duration(in.Data.TimeoutMS) * time.Millisecond, Approved: true, Approvals: approvals,
		JudgeOnly: in.Data.JudgeOnly, ParentCallID: in.Data.ParentCallID}
	c.Progress = w.progress(in, c)
	if !c.JudgeOnly { // approved, it is answered without running
		w.executions.Add(1)
	}
	xctx, x := w.startExecute(trace.ContextWithSpanContext(w.execCtx, trace.SpanContextFromContext(ctx)), in, c, true)
	out, err := w.handler.Handle(xctx, c)
	res := outcome(c, out, err, w.stopping.Load())
	defer func() { w.endExecute(xctx, x, in, c, &res, err) }()
	w.violation(in, c, err)
	if res.Status == events.StatusPending { // cannot happen with Approved; fail closed
		res.Status, res.IsError = events.StatusDenied, true
	}
	return res, nil
}

// storedResult is the latest result stored for a call, if any.
func (w *Worker) storedResult(ctx context.Context, in *events.Call) (*events.ResultData, bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	raw, err := w.results.GetLastMsgForSubject(ctx, events.ResultSubject(in.Agent, in.ID))
	if err != nil {
		return nil, false
	}
	r, err := w.cfg.Verifier.Result(raw.Header, raw.Data, in.Agent, in.ID, "")
	if err != nil {
		// Not a result this fleet's workers made for this call: it
		// does not count as "finished before".
		w.forged.Add(1)
		w.log.Warn("stored result refused", "call_id", in.ID, "agent", in.Agent, "err", err)
		return nil, false
	}
	return r, true
}

func parseMode(s string) events.Mode {
	switch s {
	case events.Structured.String():
		return events.Structured
	case events.StructuredBare.String():
		return events.StructuredBare
	}
	return events.Binary
}
