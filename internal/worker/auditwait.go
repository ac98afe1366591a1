package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/fate"
	"github.com/toolgate/toolgate/pkg/events"
)

// No call without its audit. A call's message is acked only once both
// its result and its audit events are stored: finish publishes the
// result and, in parallel, the audit events, then waits for the audit
// events while the call's heartbeat keeps its message and claim alive.
// While the audit stream cannot store them (no leader, deleted), the
// call keeps its slot: at most Concurrency calls of a worker have run
// without their audit stored, and the worker takes no new call while
// every slot waits, so calls back up in the calls stream instead of
// running unaudited (the toolgate.audit.pending gauge counts them, and
// /readyz says not ready once one has waited longer than the publish
// timeout). A stopping worker waits for them up to the end of its
// shutdown grace; then it keeps the events it could not store in each
// call's record, logs each call id, and hands the call back once the
// records are complete (handBackUnaudited): its redelivery publishes
// those very events (same chain link, same dedup id) before it acks. A worker that dies leaves the call to its
// redelivery, which finds the stored result without its execution event
// and publishes that event before it acks (duplicate).

// errAuditUnstored: the call's audit events could not be stored before
// the worker stopped; they are kept in its record for the redelivery.
var errAuditUnstored = errors.New("audit events not stored")

// keptEvent is an audit event kept in a call's record, as published.
type keptEvent struct {
	Subject string      `json:"subject"`
	Header  nats.Header `json:"header"`
	Data    []byte      `json:"data"`
}

// awaitAudit waits until the audit events of the call key are stored.
// Once the worker's shutdown grace is over (graceOver) it waits one publish timeout more, then keeps those not
// stored in the call's record (with res, its stored result) and returns
// errAuditUnstored: the caller leaves the call unacked.
func (w *Worker) awaitAudit(in *events.Call, key string, res *events.ResultData) error {
	done := w.obs.auditQueue.awaiting(key)
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-w.graceOver:
	}
	last := time.NewTimer(w.cfg.publishTimeout)
	defer last.Stop()
	select {
	case <-done:
		return nil
	case <-last.C:
	}
	msgs := w.obs.auditQueue.abandon(key)
	if len(msgs) == 0 {
		return nil
	}
	rec := record{State: stateDone, Worker: w.cfg.Name, Started: time.Now(), Heartbeat: time.Now(), Result: res}
	for _, m := range msgs {
		rec.Audit = append(rec.Audit, keptEvent{Subject: m.Subject, Header: m.Header, Data: m.Data})
	}
	w.keepUnaudited(in, key, rec)
	return errAuditUnstored
}

// leftUnaudited notes the message of a call the worker leaves unacked for
// want of its audit events (errAuditUnstored), for handBackUnaudited.
func (w *Worker) leftUnaudited(msg callMsg) {
	s, ok := msg.(deliveredMsg)
	if !ok {
		return
	}
	w.unauditedMu.Lock()
	w.unauditedMsgs = append(w.unauditedMsgs, s)
	w.unauditedMu.Unlock()
}

// handBackUnaudited hands back the calls the stopping worker leaves
// unaudited, once their records hold everything their redelivery stores
// (their events and the chain's closing checkpoint, keepCheckpoint), with
// a hand-back the server confirms (delivery.NakWithDelay): another worker
// stores their events at once instead of after a whole ack wait. Its pull
// requests have all ended, so none comes back here. A hand-back that is
// not confirmed leaves the call to its ack wait.
func (w *Worker) handBackUnaudited() {
	w.unauditedMu.Lock()
	msgs := w.unauditedMsgs
	w.unauditedMsgs = nil
	w.unauditedMu.Unlock()
	for _, m := range msgs {
		w.settle(m, fate.Retry(0, nil))
	}
	if len(msgs) > 0 {
		w.log.Info("stopping: calls left unaudited handed back", "calls", len(msgs))
	}
}

// keepUnaudited writes the record of a call whose audit events could not
// be stored, for its redelivery, and logs the call.
func (w *Worker) keepUnaudited(in *events.Call, key string, rec record) {
	w.unauditedMu.Lock()
	if w.unaudited == nil {
		w.unaudited = map[string]record{}
	}
	w.unaudited[key] = rec
	w.unauditedMu.Unlock()
	b, _ := json.Marshal(rec)
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.publishTimeout)
	defer cancel()
	if _, err := w.calls.Put(ctx, key, b); err != nil {
		w.log.Error("audit events not stored and not kept; the call is left unacked, its redelivery publishes a new execution event",
			"call_id", in.ID, "agent", in.Agent, "events", len(rec.Audit), "err", err)
		return
	}
	w.log.Error("audit events not stored before the stop; the call is left unacked for another worker to finish",
		"call_id", in.ID, "agent", in.Agent, "events", len(rec.Audit))
}

// keepCheckpoint adds the chain's closing checkpoint m, which could not
// be stored, to the records of the calls left unaudited, so that their
// redelivery stores it too (its dedup id stores it once).
func (w *Worker) keepCheckpoint(m *nats.Msg) bool {
	w.unauditedMu.Lock()
	defer w.unauditedMu.Unlock()
	kept := false
	for key, rec := range w.unaudited {
		rec.Audit = append(rec.Audit, keptEvent{Subject: m.Subject, Header: m.Header, Data: m.Data})
		b, _ := json.Marshal(rec)
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.publishTimeout)
		_, err := w.calls.Put(ctx, key, b)
		cancel()
		kept = kept || err == nil
	}
	return kept
}

// replayKept publishes the audit events kept in a call's record rec, and
// waits for each to be stored.
func (w *Worker) replayKept(ctx context.Context, rec record) error {
	for _, k := range rec.Audit {
		m := &nats.Msg{Subject: k.Subject, Header: k.Header, Data: k.Data}
		var err error
		for attempt, wait := 1, 250*time.Millisecond; attempt <= publishAttempts; attempt, wait = attempt+1, wait*2 {
			pctx, cancel := context.WithTimeout(ctx, w.cfg.publishTimeout)
			_, err = w.js.PublishMsg(pctx, m)
			cancel()
			if err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(wait)
		}
		if err != nil {
			return fmt.Errorf("publish kept audit event %s: %w", m.Header.Get(nats.MsgIdHdr), err)
		}
	}
	return nil
}

// executionAudited reports whether the audit stream holds the execution
// event of call in (its dedup id), looking at the events of its agent and
// tool stored since since.
func (w *Worker) executionAudited(ctx context.Context, in *events.Call, tool string, since time.Time) (bool, error) {
	start := since.Add(-time.Minute)
	cons, err := w.js.OrderedConsumer(ctx, bus.StreamAudit, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.AuditSubject(tokenOr(in.Agent, "_"), tokenOr(tool, "_"))},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy, OptStartTime: &start, HeadersOnly: true,
	})
	if err != nil {
		return false, err
	}
	want := CallKey(in.Agent, in.ID) + ":audit"
	for {
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			return false, err
		}
		n := 0
		var last jetstream.Msg
		for m := range batch.Messages() {
			n++
			last = m
			if m.Headers().Get(nats.MsgIdHdr) == want {
				return true, nil
			}
		}
		if err := batch.Error(); err != nil {
			return false, err
		}
		if n == 0 {
			return false, nil
		}
		if md, err := last.Metadata(); err == nil && md.NumPending == 0 {
			return false, nil
		}
	}
}

// replayKeptOf publishes the audit events kept in the record of the call
// key, if any, and drops them from the record once stored.
func (w *Worker) replayKeptOf(ctx context.Context, key string) error {
	e, err := w.calls.Get(ctx, key)
	if err != nil {
		return nil // no record: nothing kept
	}
	var rec record
	if json.Unmarshal(e.Value(), &rec) != nil || len(rec.Audit) == 0 {
		return nil
	}
	if err := w.replayKept(ctx, rec); err != nil {
		return err
	}
	rec.Audit = nil
	if b, err := json.Marshal(rec); err == nil {
		_, _ = w.calls.Update(ctx, key, b, e.Revision())
	}
	return nil
}

// auditedKeeping is executionAudited retried while the audit stream
// cannot answer (up to claimRetryFor), keeping msg in progress
// meanwhile, so that an outage does not spend the call's deliveries.
func (w *Worker) auditedKeeping(msg callMsg, in *events.Call, tool string, since time.Time) (bool, error) {
	deadline := time.Now().Add(claimRetryFor)
	for gap := 250 * time.Millisecond; ; gap = min(2*gap, 5*time.Second) {
		ctx, cancel := context.WithTimeout(w.execCtx, w.cfg.publishTimeout)
		ok, err := w.executionAudited(ctx, in, tool, since)
		cancel()
		if err == nil || w.execCtx.Err() != nil || time.Now().After(deadline) {
			return ok, err
		}
		_ = msg.InProgress()
		select {
		case <-w.execCtx.Done():
			return false, err
		case <-time.After(gap):
		}
	}
}
