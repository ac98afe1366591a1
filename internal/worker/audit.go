package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/parking"
	papproval "github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
)

// The audit trail: one dev.toolgate.call.audited.v1 event per call that
// reached a final status and one dev.toolgate.decision.audited.v1 event
// per decision, on toolgate.audit.<agent>.<tool>; the gate's decision on
// a call whose execution event is published in the same run is folded
// into that event (decided_by "policy", decided_at) instead of an event
// of its own. Every publish's ack is awaited; a failed one is counted and
// retried with its dedup id for as long as the worker runs. A call is
// finished (its message acked) only once its audit events are stored
// (awaitAudit): a worker that stops first leaves them in the call's
// record and the call unacked, and a worker that dies first leaves the
// call to a redelivery that publishes the missing event (redelivery.go).

// audit publishes the execution audit event of a call that reached its
// final status, and counts the call by tool and outcome.
func (w *Worker) audit(in *events.Call, res events.ResultData, appr *events.ApprovalAudit) {
	w.sendAudits(w.auditExecution(nil, in, res, appr, "", nil))
}

// auditExecution links the execution audit event of a call that reached
// its final status into the chain, appending it to b unsigned, and
// counts the call by tool and outcome; with the arguments' hash when
// already known (empty: computed here) and the gate's decision on this
// run folded in (nil: none).
func (w *Worker) auditExecution(b []linkedAudit, in *events.Call, res events.ResultData, appr *events.ApprovalAudit, argsHash string, gate *pendingDecision) []linkedAudit {
	a := w.auditData(in, res.Tool, in.Data.SessionID, argsHash)
	a.Kind, a.Status, a.IsError, a.Decision = events.AuditExecution, res.Status, res.IsError, res.Decision
	a.DurationMS, a.OutputBytes, a.Error, a.Approval = res.DurationMS, len(res.Output), res.Error, appr
	a.ResultSHA256 = stringSHA256Hex(res.Output)
	a.Confinement = events.ConfinementOf(res.Metadata)
	a.Hooks = res.Hooks
	a.Resumed, a.Cached, a.ParentCallID = appr != nil, res.Cached, res.ParentCallID
	if gate != nil {
		d := gate.data
		a.DecidedBy, a.DecidedAt, a.TraceID, a.SpanID = d.DecidedBy, d.Time, d.TraceID, d.SpanID
		a.Judged = d.Judged
	}
	w.countOutcome(context.Background(), &res)
	agent, tool := tokenOr(in.Agent, "_"), tokenOr(res.Tool, "_")
	return w.linkAudit(b, events.AuditSubject(agent, tool), CallKey(in.Agent, in.ID)+":audit", events.TypeCallAudited, a)
}

// auditDecision records the decision audit event of the gate's decision
// d on a call (x says whether it was the judgement of a resumed call). It
// is published right after the call's result (see auditAfterResult), so
// that neither its encoding nor its storing delays the result, folded
// into the call's execution audit event when it can be; whatever path
// the call takes, it is published by the end of the call's handling at
// the latest (flushDecision).
func (w *Worker) auditDecision(ctx context.Context, in *events.Call, res *events.ResultData, d *policy.Decision, x *execution) {
	tool := in.Tool
	if res.Tool != "" {
		tool = res.Tool
	}
	a := w.auditData(in, tool, in.Data.SessionID, deferredHash)
	a.Kind, a.Status, a.DecidedBy, a.Resumed = events.AuditDecision, res.Status, []string{"policy"}, x.resumed
	a.Decision = wireDecision(*d)
	a.Judged = w.wireJudged(d.Judged)
	a.Time = x.start.UTC()
	a.DurationMS = max(time.Since(x.start).Milliseconds(), 0)
	setTrace(&a, ctx)
	id := CallKey(in.Agent, in.ID) + ":decision"
	if x.resumed {
		id += ":resumed"
	}
	agent, t := tokenOr(in.Agent, "_"), tokenOr(tool, "_")
	p := &pendingDecision{subject: events.AuditSubject(agent, t), id: id, data: a}
	if old, loaded := w.decisions.Swap(in, p); loaded {
		w.publishDecision(in, old.(*pendingDecision), "") // not expected: one judgement per run
	}
}

// recordedDecision makes the gate's decision kept in an interrupted
// call's record the call's pending decision, to be folded into its
// execution audit event.
func (w *Worker) recordedDecision(in *events.Call, res *events.ResultData, rec record) {
	a := w.auditData(in, res.Tool, in.Data.SessionID, deferredHash)
	a.Kind, a.Status, a.DecidedBy, a.Decision = events.AuditDecision, res.Status, []string{"policy"}, rec.Decision
	a.Time, a.ParentCallID = rec.DecidedAt, res.ParentCallID
	agent, t := tokenOr(in.Agent, "_"), tokenOr(res.Tool, "_")
	if old, loaded := w.decisions.Swap(in, &pendingDecision{subject: events.AuditSubject(agent, t), id: CallKey(in.Agent, in.ID) + ":decision", data: a}); loaded {
		w.publishDecision(in, old.(*pendingDecision), "") // not expected: one judgement per delivery
	}
}

// deferredHash marks an audit event whose arguments' hash is filled in
// when it is published.
const deferredHash = "\x00"

// pendingDecision is a decision audit event waiting for its call's result
// to be published.
type pendingDecision struct {
	subject, id string
	data        events.AuditData
}

// auditAfterResult publishes the audit events of a call's result
// (linkAfterResult), signed together, for a result published before.
func (w *Worker) auditAfterResult(in *events.Call, res events.ResultData, audit bool, appr *events.ApprovalAudit) {
	w.sendAudits(w.linkAfterResult(nil, in, res, audit, appr))
}

// linkAfterResult links the audit events of a call's result into the
// chain, in this order, appending them to b unsigned (publish signs them
// with the result): when audit is set, its execution audit event, with
// the gate's pending decision folded in when the event says all it said
// (folds), else after that decision's own event; when audit is not set
// (a parked call), the pending decision's event. The arguments are
// hashed once.
func (w *Worker) linkAfterResult(b []linkedAudit, in *events.Call, res events.ResultData, audit bool, appr *events.ApprovalAudit) []linkedAudit {
	p, ok := w.decisions.LoadAndDelete(in)
	switch {
	case !audit && !ok:
		return b
	case !audit:
		return w.linkDecision(b, in, p.(*pendingDecision), "")
	case !ok:
		return w.auditExecution(b, in, res, appr, "", nil)
	}
	gate := p.(*pendingDecision)
	if gate.folds(res, appr) {
		return w.auditExecution(b, in, res, appr, "", gate)
	}
	hash := ArgsSHA256(in.Data.Arguments)
	b = w.linkDecision(b, in, gate, hash)
	return w.auditExecution(b, in, res, appr, hash, nil)
}

// folds reports whether the execution audit event of result res (appr:
// the people's approval it ran with) can carry the gate's decision p
// without losing what p's own event would say: the same decision (the
// execution's adds only the approvers, named in its approval too), tool,
// status, parent task and resumption. A decision the run changed after
// the gate (a hook's or a path check's denial, a resumed call that now
// needs more approvals) keeps its own event.
func (p *pendingDecision) folds(res events.ResultData, appr *events.ApprovalAudit) bool {
	g, e := p.data.Decision, res.Decision
	if g == nil || e == nil || len(g.Approvers) > 0 {
		return false
	}
	if g.Action != e.Action || g.Reason != e.Reason || g.Rule != e.Rule || g.Offending != e.Offending || g.Revision != e.Revision {
		return false
	}
	if len(e.Approvers) > 0 && (appr == nil || !slices.Equal(e.Approvers, appr.Approvers)) {
		return false
	}
	return p.data.Tool == res.Tool && p.data.Status == res.Status && p.data.ParentCallID == res.ParentCallID &&
		p.data.Resumed == (appr != nil) && slices.Equal(p.data.DecidedBy, []string{"policy"})
}

// flushDecision publishes the call's pending decision audit event, if
// any. The end of a call's handling calls it too, so that a decision
// whose call ended without a result publish is still audited.
func (w *Worker) flushDecision(in *events.Call) {
	if p, ok := w.decisions.LoadAndDelete(in); ok {
		w.publishDecision(in, p.(*pendingDecision), "")
	}
}

// publishDecision publishes the decision audit event p, signed alone.
func (w *Worker) publishDecision(in *events.Call, p *pendingDecision, hash string) {
	w.sendAudits(w.linkDecision(nil, in, p, hash))
}

// linkDecision links the decision audit event p into the chain,
// appending it to b unsigned; hash is the arguments' (empty: computed
// here).
func (w *Worker) linkDecision(b []linkedAudit, in *events.Call, p *pendingDecision, hash string) []linkedAudit {
	if hash == "" {
		hash = ArgsSHA256(in.Data.Arguments)
	}
	p.data.ArgsSHA256 = hash
	return w.linkAudit(b, p.subject, p.id, events.TypeDecisionAudited, p.data)
}

// auditPeople publishes the decision audit event of what people decided
// about a parked call.
func (w *Worker) auditPeople(ctx context.Context, in *events.Call, p *parking.Parked, o parking.Outcome) {
	a := w.auditData(in, in.Tool, in.Data.SessionID, "")
	a.Kind, a.DecidedBy, a.Approval = events.AuditDecision, o.Approvers, o.Audit()
	if len(o.EditedArguments) > 0 {
		a.Approval.OriginalArgsSHA256 = a.ArgsSHA256
	}
	if len(a.DecidedBy) == 0 && o.Status == papproval.Expired {
		a.DecidedBy = []string{"expiry"}
	}
	d := wireDecision(p.Decision)
	d.Action, d.Approvers = string(o.Status), o.Approvers
	a.Decision = d
	a.Time = o.DecidedAt.UTC()
	if !p.ParkedAt.IsZero() && !o.DecidedAt.IsZero() {
		a.DurationMS = max(o.DecidedAt.Sub(p.ParkedAt).Milliseconds(), 0)
	}
	setTrace(&a, ctx)
	agent, tool := tokenOr(in.Agent, "_"), tokenOr(in.Tool, "_")
	w.publishAudit(events.AuditSubject(agent, tool), CallKey(in.Agent, in.ID)+":decision:people", events.TypeDecisionAudited, a)
}

// auditData is what every audit event of a call says. argsHash is the
// arguments' hash when known: empty computes it, deferredHash leaves it
// for the publish.
func (w *Worker) auditData(in *events.Call, tool, session, argsHash string) events.AuditData {
	switch argsHash {
	case "":
		argsHash = ArgsSHA256(in.Data.Arguments)
	case deferredHash:
		argsHash = ""
	}
	return events.AuditData{CallID: in.ID, Agent: in.Agent, Tool: tool, SessionID: session,
		ArgsSHA256: argsHash, Worker: w.cfg.Name, Time: time.Now().UTC(), JudgeOnly: in.Data.JudgeOnly,
		ParentCallID: in.Data.ParentCallID}
}

func setTrace(a *events.AuditData, ctx context.Context) {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		a.TraceID, a.SpanID = sc.TraceID().String(), sc.SpanID().String()
	}
}

// ArgsSHA256 is the hex SHA-256 of the canonical JSON of a call's
// arguments (pkg/approval.Canonical: keys sorted, no whitespace); of the
// bytes as they came when they have no canonical form.
func ArgsSHA256(args []byte) string {
	if c, err := papproval.Canonical(args); err == nil {
		return SHA256Hex(c)
	}
	return SHA256Hex(args)
}

// SHA256Hex is the hex SHA-256 of b.
func SHA256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// stringSHA256Hex is SHA256Hex of s's bytes without copying s whole (an
// output can be megabytes): it is hashed through a small buffer.
func stringSHA256Hex(s string) string {
	if len(s) <= 64 {
		return SHA256Hex([]byte(s))
	}
	h := sha256.New()
	var buf [512]byte
	for len(s) > 0 {
		n := copy(buf[:], s)
		h.Write(buf[:n])
		s = s[n:]
	}
	return hex.EncodeToString(h.Sum(nil))
}

// auditQueue collects the store acknowledgements of audit publishes
// without a goroutine or a future per publish: each is published with a
// reply subject of its own under one inbox, whose subscription's handler
// matches the acknowledgement to the publish; a failure is retried (see
// retryAudit), and so is a publish not acknowledged within the publish
// timeout, which the sweeper finds.
type auditQueue struct {
	once        sync.Once
	inbox       string
	sub         *nats.Subscription // nil when the inbox could not be subscribed
	mu          sync.Mutex
	pending     map[string]pendingAudit // by reply token
	calls       map[string]*callAudit   // by call key: what finishes wait for
	seq         uint64
	stopped     bool          // the inbox is gone: publishes are synchronous
	sweeping    bool          // a sweeper runs
	quit        chan struct{} // ends the sweeper
	outstanding inFlight
}

// inFlight counts the audit publishes not yet acknowledged or given up.
// Unlike a sync.WaitGroup it may be added to while a stop waits for it
// (the audit event of a call finishing, or the chain's last checkpoint,
// as the worker stops).
type inFlight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n comes back to 0; nil when none waits
}

// Add adds d to the count.
func (f *inFlight) Add(d int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n += d
	if f.n <= 0 && f.idle != nil {
		close(f.idle)
		f.idle = nil
	}
}

// Done is Add(-1).
func (f *inFlight) Done() { f.Add(-1) }

// Idle returns a channel closed once nothing is in flight.
func (f *inFlight) Idle() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n <= 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	if f.idle == nil {
		f.idle = make(chan struct{})
	}
	return f.idle
}

type pendingAudit struct {
	m      *nats.Msg
	callID string
	key    string // the call's key (CallKey); "" for a checkpoint
	sent   time.Time
}

// callAudit is what a call's finish waits for: its audit events not yet
// stored, by dedup id.
type callAudit struct {
	msgs  map[string]*nats.Msg
	since time.Time     // when the oldest was published
	done  chan struct{} // closed once none is left
}

// publishAudit publishes an audit event signed alone; its
// acknowledgement is handled by auditAck, a failure retried.
func (w *Worker) publishAudit(subject, id, typ string, data events.AuditData) {
	w.sendAudits(w.linkAudit(nil, subject, id, typ, data))
}

// linkedAudit is an audit event linked into the chain and encoded, its
// signature still to be made, with the other events signed together
// with it (signEvents).
type linkedAudit struct {
	u           events.Unsigned
	callID, key string
	checkpoint  *nats.Msg // due after it (signed); nil when none is
}

// linkAudit links an audit event into the chain and appends it to b,
// unsigned; an event that cannot be encoded is counted lost.
func (w *Worker) linkAudit(b []linkedAudit, subject, id, typ string, data events.AuditData) []linkedAudit {
	u, checkpoint, err := w.chain.link(w, subject, id, typ, &data)
	if err != nil {
		w.obs.m.AuditLost.Add(context.Background(), 1)
		w.log.Error("audit event lost: encode", "call_id", data.CallID, "type", typ, "err", err)
		return b
	}
	return append(b, linkedAudit{u: u, callID: data.CallID, key: CallKey(data.Agent, data.CallID), checkpoint: checkpoint})
}

// sendAudits signs the audit events of b together (one event: alone)
// and publishes them.
func (w *Worker) sendAudits(b []linkedAudit) {
	if len(b) == 0 {
		return
	}
	us := make([]*events.Unsigned, len(b))
	for i := range b {
		us[i] = &b[i].u
	}
	msgs, err := w.signEvents(us)
	if err != nil {
		w.auditUnsigned(b, err)
		return
	}
	w.enqueueAudits(b, msgs)
}

// enqueueAudits publishes the audit events of b, signed (msgs, in b's
// order), each followed by the checkpoint due after it.
func (w *Worker) enqueueAudits(b []linkedAudit, msgs []*nats.Msg) {
	for i, l := range b {
		w.enqueueAudit(msgs[i], l.callID, l.key)
		if l.checkpoint != nil {
			w.enqueueAudit(l.checkpoint, "", "")
		}
	}
}

// auditUnsigned counts and logs the audit events of b lost because they
// could not be signed (a broken key: no signature can be made).
func (w *Worker) auditUnsigned(b []linkedAudit, err error) {
	for _, l := range b {
		w.obs.m.AuditLost.Add(context.Background(), 1)
		w.log.Error("audit event lost: sign", "call_id", l.callID, "event", l.u.ID(), "err", err)
		if l.checkpoint != nil {
			w.enqueueAudit(l.checkpoint, "", "")
		}
	}
}

// signEvents signs the events with one signature (pkg/eventsig: the
// single form for one event, the co-signed form for more) and returns
// their messages, in order; unsigned when the worker has no signer.
func (w *Worker) signEvents(us []*events.Unsigned) ([]*nats.Msg, error) {
	var sigs []string
	var signer string
	if w.signBatch != nil {
		inputs := make([][]byte, len(us))
		for i, u := range us {
			inputs[i] = u.Input()
		}
		var err error
		if sigs, signer, err = w.signBatch(inputs); err != nil {
			return nil, fmt.Errorf("sign %s: %w", us[0].ID(), err)
		}
	}
	msgs := make([]*nats.Msg, len(us))
	for i, u := range us {
		sig := ""
		if sigs != nil {
			sig = sigs[i]
		}
		m, err := u.Signed(sig, signer)
		if err != nil {
			return nil, err
		}
		msgs[i] = m
	}
	return msgs, nil
}

// track records m as an unstored audit event of the call key.
func (q *auditQueue) track(key string, m *nats.Msg) {
	if key == "" {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.calls == nil {
		q.calls = map[string]*callAudit{}
	}
	c := q.calls[key]
	if c == nil {
		c = &callAudit{msgs: map[string]*nats.Msg{}, since: time.Now(), done: make(chan struct{})}
		q.calls[key] = c
	}
	c.msgs[m.Header.Get(nats.MsgIdHdr)] = m
}

// stored records that the audit event m of the call key is stored.
func (q *auditQueue) stored(key string, m *nats.Msg) {
	if key == "" {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.calls[key]
	if c == nil {
		return
	}
	delete(c.msgs, m.Header.Get(nats.MsgIdHdr))
	if len(c.msgs) == 0 {
		close(c.done)
		delete(q.calls, key)
	}
}

// awaiting returns a channel closed once every audit event of the call
// key is stored; nil when none is pending.
func (q *auditQueue) awaiting(key string) <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if c := q.calls[key]; c != nil {
		return c.done
	}
	return nil
}

// abandon stops waiting for the call key's audit events and returns
// those not stored (their retries go on until the worker stops).
func (q *auditQueue) abandon(key string) []*nats.Msg {
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.calls[key]
	if c == nil {
		return nil
	}
	delete(q.calls, key)
	out := make([]*nats.Msg, 0, len(c.msgs))
	for _, m := range c.msgs {
		out = append(out, m)
	}
	return out
}

// backlog is how many calls wait for their audit events and how long
// the oldest of them has waited.
func (q *auditQueue) backlog() (calls int, oldest time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	for _, c := range q.calls {
		oldest = max(oldest, now.Sub(c.since))
	}
	return len(q.calls), oldest
}

// enqueueAudit publishes an encoded audit message; its acknowledgement
// is handled by auditAck, a failure retried.
func (w *Worker) enqueueAudit(m *nats.Msg, callID, key string) {
	q := &w.obs.auditQueue
	q.once.Do(w.startAuditAcks)
	q.outstanding.Add(1)
	q.track(key, m)
	if q.sub == nil {
		go w.retryAudit(m, callID, key, nil) // no inbox for acknowledgements
		return
	}
	q.mu.Lock()
	if q.stopped {
		q.mu.Unlock()
		go w.retryAudit(m, callID, key, nil) // the inbox is gone
		return
	}
	q.seq++
	token := strconv.FormatUint(q.seq, 36)
	m.Reply = q.inbox + "." + token
	q.pending[token] = pendingAudit{m: m, callID: callID, key: key, sent: time.Now()}
	if !q.sweeping {
		q.sweeping = true
		go w.sweepAudit(q.quit)
	}
	q.mu.Unlock()
	if err := w.nc.PublishMsg(m); err != nil {
		if p, ok := q.take(token); ok {
			go w.retryAudit(p.m, p.callID, p.key, err)
		}
	}
}

// startAuditAcks subscribes the audit acknowledgements' inbox;
// stopAuditAcks unsubscribes it and ends the sweeper.
func (w *Worker) startAuditAcks() {
	q := &w.obs.auditQueue
	q.inbox = w.nc.NewInbox()
	q.pending = map[string]pendingAudit{}
	sub, err := w.nc.Subscribe(q.inbox+".*", w.auditAck)
	if err != nil {
		w.log.Warn("audit acknowledgements: cannot subscribe; every audit publish is synchronous", "err", err)
		return
	}
	_ = sub.SetPendingLimits(-1, -1) // acks are small and none may be dropped
	q.sub, q.quit = sub, make(chan struct{})
}

func (w *Worker) stopAuditAcks() {
	q := &w.obs.auditQueue
	q.once.Do(func() {}) // none starts later
	if q.sub == nil {
		return
	}
	q.mu.Lock()
	q.stopped = true
	q.mu.Unlock()
	_ = q.sub.Unsubscribe()
	close(q.quit)
}

// take removes the publish of reply token token from the pending ones.
func (q *auditQueue) take(token string) (pendingAudit, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	p, ok := q.pending[token]
	delete(q.pending, token)
	return p, ok
}

// auditAck handles the acknowledgement of an audit publish.
func (w *Worker) auditAck(ack *nats.Msg) {
	q := &w.obs.auditQueue
	p, ok := q.take(ack.Subject[min(len(ack.Subject), len(q.inbox)+1):])
	if !ok {
		return // given up on already: its retry runs
	}
	if _, err := parsePubAck(ack); err != nil {
		go w.retryAudit(p.m, p.callID, p.key, err)
		return
	}
	q.stored(p.key, p.m)
	q.outstanding.Done()
}

// sweepAudit retries, every second, the audit publishes not acknowledged
// within the publish timeout. It runs while publishes are pending and
// ends after two seconds with none (publishAudit starts it again).
func (w *Worker) sweepAudit(quit chan struct{}) {
	q := &w.obs.auditQueue
	t := time.NewTicker(time.Second)
	defer t.Stop()
	idle := 0
	for {
		select {
		case <-quit:
			return
		case now := <-t.C:
			var late []pendingAudit
			q.mu.Lock()
			for token, p := range q.pending {
				if now.Sub(p.sent) >= w.cfg.publishTimeout {
					late = append(late, p)
					delete(q.pending, token)
				}
			}
			if idle++; len(q.pending) > 0 {
				idle = 0
			}
			done := idle >= 2
			if done {
				q.sweeping = false
			}
			q.mu.Unlock()
			for _, p := range late {
				go w.retryAudit(p.m, p.callID, p.key, fmt.Errorf("no ack from JetStream within %s", w.cfg.publishTimeout))
			}
			if done {
				return
			}
		}
	}
}

// retryAudit publishes m again after err, waiting for each ack, with
// backoff, until it is stored or the worker gives up at the end of its
// shutdown grace (auditGiveUp); the dedup id makes a retry of a publish
// that was stored after all harmless. With a nil err it publishes m
// synchronously at once (no inbox for acknowledgements), counting only
// failures. An event given up on is not dropped in silence: its call's
// finish keeps it in the call's record and leaves the call unacked
// (awaitAudit); a checkpoint is logged.
func (w *Worker) retryAudit(m *nats.Msg, callID, key string, err error) {
	defer w.obs.outstanding.Done()
	m.Reply = "" // the synchronous publish has its own
	id := m.Header.Get(nats.MsgIdHdr)
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		if err != nil {
			w.obs.m.AuditFailures.Add(context.Background(), 1)
			w.log.Warn("audit publish failed; retrying", "call_id", callID, "event", id, "attempt", attempt, "err", err)
			select {
			case <-time.After(wait):
			case <-w.auditGiveUp:
				w.obs.m.AuditLost.Add(context.Background(), 1)
				w.log.Error("audit event not stored by the end of the shutdown grace", "call_id", callID, "event", id, "subject", m.Subject, "err", err)
				return
			}
			wait = min(wait*2, auditRetryMax)
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.publishTimeout)
		_, err = w.js.PublishMsg(ctx, m)
		cancel()
		if err == nil {
			w.obs.auditQueue.stored(key, m)
			return
		}
		w.recreateAudit() // no stream answered: perhaps there is none

	}
}

// recreateAudit creates the audit stream again when it was deleted, at
// most once every recreateEvery: the events retried then land in it,
// and `toolctl audit --verify` reports those the deletion removed (the
// chains' first events, the anchors of removed chains, the results
// without their execution event).
func (w *Worker) recreateAudit() {
	now := time.Now().UnixNano()
	last := w.auditRecreated.Load()
	if now-last < int64(recreateEvery) || !w.auditRecreated.CompareAndSwap(last, now) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.publishTimeout)
	defer cancel()
	created, err := bus.Recreate(ctx, w.js, w.cfg.Bus, bus.StreamAudit)
	switch {
	case err != nil:
		w.log.Warn("audit stream missing and not recreated", "err", err)
	case created:
		w.log.Error("audit stream was deleted: recreated; the events stored before are gone, as toolctl audit --verify reports", "stream", bus.StreamAudit)
	}
}

// recreateEvery spaces a worker's checks for a deleted audit stream.
const recreateEvery = 2 * time.Second

// auditRetryMax caps the backoff between the publishes of an audit event.
const auditRetryMax = 5 * time.Second

// drainAudit waits until deadline for every audit publish to be acked,
// then gives up on the rest (auditGiveUp); it reports whether all were
// stored.
func (w *Worker) drainAudit(deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-w.obs.outstanding.Idle():
		return true
	case <-t.C:
	}
	w.giveUpAudit()
	return false
}

// giveUpAudit ends the audit retries (the worker stops).
func (w *Worker) giveUpAudit() { w.auditGiveUpOnce.Do(func() { close(w.auditGiveUp) }) }
