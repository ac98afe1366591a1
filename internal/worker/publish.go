package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nuid"

	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// finish publishes the final result and audit, and waits until both are
// stored (awaitAudit). When the result cannot be stored even after
// retries, it is kept in the call's record for the redelivery (or the
// next resume) to publish, and the error returned; so are audit events
// still not stored when the worker stops (errAuditUnstored). stop, when
// set, ends the call's heartbeat once publishing is over.
func (w *Worker) finish(in *events.Call, key string, res events.ResultData, appr *events.ApprovalAudit, stop func()) error {
	err := w.publish(in, res, true, appr)
	if err == nil {
		err = w.awaitAudit(in, key, &res)
	}
	if stop != nil {
		stop()
	}
	if err == nil || errors.Is(err, errAuditUnstored) {
		return err
	}
	now := time.Now()
	rec, _ := json.Marshal(record{State: stateDone, Worker: w.cfg.Name, Started: now, Heartbeat: now, Result: &res})
	if _, kerr := w.calls.Put(context.Background(), key, rec); kerr != nil {
		w.log.Error("result lost: neither published nor kept", "call_id", in.ID, "err", err, "kv_err", kerr)
	} else {
		w.log.Error("result kept for a later publish", "call_id", in.ID, "err", err)
	}
	return err
}

// publishResult publishes res on the agent's result subject in the mode
// the call came in and, when audit is set, the audit event; it waits for
// both to be stored.
func (w *Worker) publishResult(in *events.Call, res events.ResultData, audit bool) {
	if err := w.publish(in, res, audit, nil); err != nil {
		w.log.Error("publish result", "call_id", in.ID, "status", res.Status, "err", err)
	}
}

// publish publishes res on the agent's result subject in the mode the call
// came in and, when audit is set, the audit event (linkAfterResult). The
// result and its audit events are signed together, with one signature;
// the result is written first. It waits until the result is stored,
// retrying with backoff (a stream leader change takes a second or two);
// the dedup id makes a retry harmless.
func (w *Worker) publish(in *events.Call, res events.ResultData, audit bool, appr *events.ApprovalAudit) error {
	res.Agent, res.CallID = in.Agent, in.ID
	id := CallKey(in.Agent, in.ID) + ":" + string(res.Status)
	if res.Status.Final() {
		id = CallKey(in.Agent, in.ID) + ":result"
	}
	u, err := events.EncodeUnsigned(events.ResultSubject(in.Agent, in.ID), events.Attrs{ID: id, Source: w.source,
		Type: events.TypeCallCompleted, Subject: in.ID, TraceParent: in.TraceParent}, res, in.Mode)
	if err != nil {
		return err
	}
	var buf [3]linkedAudit // a decision and an execution event at most
	b := w.linkAfterResult(buf[:0], in, res, audit, appr)
	us := make([]*events.Unsigned, 1, 1+len(b))
	us[0] = &u
	for i := range b {
		us = append(us, &b[i].u)
	}
	msgs, err := w.signEvents(us)
	if err != nil {
		w.auditUnsigned(b, err)
		return err
	}
	m := msgs[0]
	box := w.boxes.get()
	reply := ""
	err = errNoBox
	if box != nil {
		reply, err = box.publish(m) // written before the audit events (replyBox.publish)
	}
	w.enqueueAudits(b, msgs[1:])
	if reply != "" {
		_, err = box.wait(reply, w.cfg.publishTimeout)
	}
	w.boxes.put(box)
	if err == nil {
		return nil
	}
	m.Reply = ""
	for attempt, wait := 1, 250*time.Millisecond; attempt < publishAttempts; attempt, wait = attempt+1, wait*2 {
		w.log.Warn("publish result: retrying", "call_id", in.ID, "attempt", attempt, "err", err)
		time.Sleep(wait)
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.publishTimeout)
		_, err = w.js.PublishMsg(ctx, m)
		cancel()
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("publish result of %s: %w", in.ID, err)
}

// errNoBox: no reply box could be made for an acknowledgement (a
// synchronous publish follows: the result's with retries, the claim's
// KeyValue.Create).
var errNoBox = errors.New("no reply subject for the acknowledgement")

// Publishing a result: attempts, and how long each waits for its ack.
const publishAttempts = 5

// defaultPublishTimeout is how long a publish waits for its ack unless
// the configuration (tests) says otherwise.
const defaultPublishTimeout = 5 * time.Second

// violation publishes the policy violation event of a call the gate
// refused (a *tools.PolicyError) or asked about (a *tools.Parked with no
// question; a question is no violation). Other outcomes publish nothing.
func (w *Worker) violation(in *events.Call, c *tools.Call, err error) {
	if err == nil {
		return // the common case: no errors.As (its targets escape)
	}
	var (
		d  policy.Decision
		pe *tools.PolicyError
		pk *tools.Parked
	)
	switch {
	case errors.As(err, &pe):
		d = pe.Decision
	case errors.As(err, &pk) && !pk.NeedsAnswer():
		d = pk.Decision
	default:
		return
	}
	v := events.ViolationData{CallID: in.ID, Agent: in.Agent, Tool: c.Name, Action: string(d.Action), Rule: d.Rule,
		Reason: d.Reason, Offending: d.Offending, Revision: d.Revision}
	if c.Tool != nil {
		v.Tool = c.Tool.Name
	}
	w.publishEvent(events.ViolationSubject(in.Agent), CallKey(in.Agent, in.ID)+":violation", events.TypePolicyViolation, v)
}

// publishEvent publishes a binary-mode event asynchronously; JetStream's
// async window bounds how many are outstanding. A failure is counted and
// retried (asyncpub.go).
func (w *Worker) publishEvent(subject, id, typ string, data any) {
	m, err := events.NewMessage(subject, id, w.source, typ, data)
	if err != nil {
		w.log.Error("encode event", "type", typ, "err", err)
		return
	}
	if _, err := w.js.PublishMsgAsync(m); err != nil {
		w.eventFailed(m, err)
	}
}

// PolicyChanged publishes that a policy was applied, or refused with the
// old one kept in force (when d.Errors is set).
func (w *Worker) PolicyChanged(d events.PolicyChangeData) {
	d.Worker = w.cfg.Name
	typ := events.TypePolicyApplied
	if len(d.Errors) > 0 {
		typ = events.TypePolicyRejected
	}
	w.countPolicyReload(typ == events.TypePolicyApplied)
	w.publishEvent(events.PolicyChangeSubject, nuid.Next(), typ, d)
}

// progress returns the call's progress sink: best-effort core NATS events.
func (w *Worker) progress(in *events.Call, c *tools.Call) func(stream, chunk string) {
	var seq atomic.Int64
	subject := events.ProgressSubject(in.Agent, in.ID)
	return func(stream, chunk string) {
		n := seq.Add(1)
		m, err := events.EncodeData(subject, events.Attrs{ID: fmt.Sprintf("%s:progress:%d", CallKey(in.Agent, in.ID), n), Source: w.source,
			Type: events.TypeCallProgress}, events.ProgressData{CallID: in.ID, Tool: c.Name, Stream: stream, Seq: n, Chunk: chunk}, events.Binary)
		if err == nil {
			_ = w.nc.PublishMsg(m)
		}
	}
}
