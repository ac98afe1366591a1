package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/fate"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools"
)

// settle applies the fate handle returned to the call message: the only
// place a call message is acked, handed back or terminated.
func (w *Worker) settle(msg deliveredMsg, f fate.Fate) {
	if f.Kind == fate.KindAck && w.beforeAck != nil && !w.beforeAck() {
		return // a crash before the ack (tests)
	}
	_ = w.settler.Settle(msg, f)
}

// handle is the whole path of one delivered call, from decoding to its
// fate: the one place to wrap with per-call tracing or metrics. It reads
// the message and keeps it alive (heartbeat) but never settles it; it
// says how in the fate it returns:
//
//   - Term: the message cannot be read (reject).
//   - Retry: the claim could not be made; nothing ran.
//   - Ack: the call's result (final, or pending when parked) is stored,
//     or a duplicate delivery was answered (redelivery.go).
//   - Leave: the result could not be published and is kept in the call's
//     record for the redelivery; or a live owner holds the call.
func (w *Worker) handle(msg callMsg) fate.Fate {
	start := time.Now()
	in, err := events.DecodeCall(msg.Subject(), msg.Headers(), msg.Data(), w.cfg.MaxPayload)
	ctx, done := w.delivery(msg, in)
	defer done()
	if err != nil {
		return w.reject(msg, in, err, start)
	}
	key := CallKey(in.Agent, in.ID)
	if w.group != nil {
		w.group.begin(key) // on its way to its final publish (groupSigner)
		defer w.group.done(key)
	}
	pure := w.pure(in.Tool)
	if pure && requeued(msg) {
		// A requeued copy, whose original may have been redelivered
		// and run too (requeue.go): claimed as any call, so that the
		// other's run is found by its claim (redelivery.go).
		pure = false
	}
	if pure && msg.NumDelivered() > 1 {
		// A redelivered pure call may have been answered already: its
		// stored result stands. Otherwise it is claimed as any call, so
		// that a cancellation, a parked record, a kept result or a
		// requeued copy's run is found.
		if res, ok := w.storedResult(ctx, in); ok && res.Status.Final() {
			// Its worker may have died before storing the execution event.
			if audited, err := w.auditedKeeping(msg, in, res.Tool, time.Now().Add(-w.ackWait()*time.Duration(msg.NumDelivered()+1))); err != nil {
				return fate.Retry(fate.Backoff(msg.NumDelivered()), fmt.Errorf("look up the audit of call %s: %w", in.ID, err))
			} else if !audited {
				w.auditAfterResult(in, *res, true, nil)
				if err := w.awaitAudit(in, key, res); err != nil {
					w.leftUnaudited(msg)
					return fate.Leave("audit event kept for the next redelivery")
				}
			}
			w.publishResult(in, *res, false)
			return fate.Ack()
		}
		pure = false
	}
	cl := w.claim(msg, key, start, in.ID, pure)
	stop := func() {}
	res, err := w.run(ctx, in, cl, func(d *events.Decision, decidedAt time.Time) { // claimed: the tool is about to run
		stop = w.heartbeat(msg, key, cl.rev, start, d, decidedAt)
		if w.group != nil {
			w.group.done(key) // no signature waits on a running tool
		}
	})
	if w.group != nil {
		w.group.begin(key) // ran: on its way to its final publish
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		return w.duplicate(msg, in, key)
	}
	if err != nil {
		return fate.Retry(fate.Backoff(msg.NumDelivered()), fmt.Errorf("claim call %s: %w", in.ID, err))
	}
	res.DurationMS = tools.Elapsed(start)
	if res.Status == events.StatusPending {
		stop()
		rec, _ := json.Marshal(record{State: stateParked, Worker: w.cfg.Name, Started: start, Heartbeat: time.Now()})
		if _, err := w.calls.Put(w.execCtx, key, rec); err != nil {
			w.log.Warn("mark parked", "call_id", in.ID, "err", err)
		}
		w.publishResult(in, res, false)
		return fate.Ack()
	}
	// The heartbeat goes on while the result is published (with retries),
	// so the message is not redelivered meanwhile.
	if err := w.finish(in, key, res, nil, stop); err != nil {
		if errors.Is(err, errAuditUnstored) {
			w.leftUnaudited(msg)
		}
		return fate.Leave("result kept in the call's record; the redelivery publishes it")
	}
	return fate.Ack()
}

// run executes a decoded call through the parking step and the pipeline.
// Nothing runs the call before its claim cl is made: the pipeline waits
// for it once the gate has allowed the call, then claimed is called. A
// call that ends before (refused, denied, parked) waits for it at the end.
// A pure call's lazy claim is made only when the call parks. claimed is
// given the gate's decision, for the claim's heartbeats to keep.
// An error means the claim was not made and nothing ran:
// jetstream.ErrKeyExists when the call was claimed before.
func (w *Worker) run(ctx context.Context, in *events.Call, cl *claim, claimed func(d *events.Decision, decidedAt time.Time)) (events.ResultData, error) {
	c := &tools.Call{ID: in.ID, Agent: in.Agent, SessionID: in.Data.SessionID, Name: in.Tool,
		Arguments: in.Data.Arguments, Timeout: time.Duration(in.Data.TimeoutMS) * time.Millisecond, JudgeOnly: in.Data.JudgeOnly,
		ParentCallID: in.Data.ParentCallID}
	c.Progress = w.progress(in, c)
	var x *execution
	c.Start = func(context.Context) error {
		if c.Tool != nil && c.Tool.Pure && (w.cfg.Budgeted == nil || !w.cfg.Budgeted(c)) {
			cl.forgo() // a pure call runs unclaimed, unless a budget counts it
		}
		if _, err := cl.wait(); err != nil {
			return err
		}
		var d *events.Decision
		if c.Decision != nil {
			d = wireDecision(*c.Decision)
		}
		claimed(d, x.start.UTC())
		if !c.JudgeOnly { // a judge-only call stops in the pipeline right after Start
			w.executions.Add(1)
		}
		return nil
	}
	ctx, x = w.startExecute(ctx, in, c, false)
	out, err := w.park(in, w.handler).Handle(ctx, c)
	var pk *tools.Parked
	if !errors.As(err, &pk) {
		cl.forgo() // a pure call that does not wait for people needs no record
	}
	if _, cerr := cl.wait(); cerr != nil {
		// Not this delivery's call to run (claimed before) or not claimed
		// at all: nothing ran; its span ends without an audit.
		w.recordExecute(ctx, x, c, &events.ResultData{Status: events.StatusError, IsError: true}, cerr)
		return events.ResultData{}, cerr
	}
	res := outcome(c, out, err, w.stopping.Load())
	defer func() { w.endExecute(ctx, x, in, c, &res, err) }()
	w.violation(in, c, err)
	return res, nil
}

// reject answers a message that could not be decoded: an error result on
// the agent's result subject when there is an agent to answer, an audit
// event, and the message terminated so it never blocks the queue.
func (w *Worker) reject(msg callMsg, in *events.Call, err error, start time.Time) fate.Fate {
	code := events.ErrorCode(err)
	w.log.Warn("rejected call", "call_id", in.ID, "subject", msg.Subject(), "code", code, "err", err)
	if events.ValidToken(in.ID) != nil {
		// No usable call id: name the result after the stream sequence.
		in.ID = "invalid"
		if seq := msg.StreamSeq(); seq > 0 {
			in.ID = fmt.Sprintf("seq-%d", seq)
		}
	}
	res := events.ResultData{CallID: in.ID, Agent: in.Agent, Tool: in.Tool, Status: events.StatusError, IsError: true,
		Error: code, Output: "rejected: " + err.Error(), DurationMS: tools.Elapsed(start)}
	if events.ValidToken(in.Agent) == nil {
		w.publishResult(in, res, true)
	} else {
		w.audit(in, res, nil)
	}
	return fate.Term(code)
}

// pure reports whether tool names a pure tool (tools.Tool.Pure) in the
// registry now: its call's claim is lazy. Whether it runs unclaimed is
// decided on the tool the pipeline resolved (run's Start), so a registry
// change in between costs a synchronous claim, never a missing one.
func (w *Worker) pure(tool string) bool {
	t, ok := w.pipe.Registry().Get(tool)
	return ok && t.Pure
}
