// Package worker runs toolgate's call loop: it takes calls from the shared
// JetStream consumer as slots of its bounded pool free up, claims each
// call id once, runs it through the tool pipeline, and publishes the
// result, the audit event and the policy violations. It is the only place
// that acks call messages.
package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/telemetry"
	papproval "github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// Config tunes a Worker. The zero value of each field means its default.
type Config struct {
	// Name identifies this worker in results and audit; default host-pid.
	Name string
	// Concurrency bounds the calls this worker runs at once; default
	// DefaultConcurrency().
	Concurrency int
	// MaxPayload bounds a call's message data in bytes; default 1 MiB.
	MaxPayload int
	// ShutdownGrace is how long running calls may finish after a stop
	// signal before they are interrupted; default 30s.
	ShutdownGrace time.Duration
	// Bus is the stream, consumer and bucket configuration provisioned at
	// start.
	Bus bus.Config
	// Parker parks calls the gate asks about; nil means an ask is refused.
	Parker Parker
	// Logger receives the worker's logs; default slog.Default().
	Logger *slog.Logger
	// Telemetry traces and measures the calls; nil records nothing.
	Telemetry *telemetry.Telemetry

	// publishTimeout is how long a publish waits for its ack; default
	// defaultPublishTimeout (tests shorten it).
	publishTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.publishTimeout <= 0 {
		c.publishTimeout = defaultPublishTimeout
	}
	if c.Name == "" {
		host, _ := os.Hostname()
		c.Name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency()
	}
	if c.MaxPayload <= 0 {
		c.MaxPayload = 1 << 20
	}
	if c.Bus.MaxPayload <= 0 {
		// The calls stream refuses what the worker would refuse.
		c.Bus.MaxPayload = int32(min(c.MaxPayload, math.MaxInt32))
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// DefaultConcurrency is the calls a worker runs at once unless told: 32
// per CPU, between 16 and 1024. Most of a call's time is spent waiting
// for JetStream (the claim, the stored result) or for a tool's process,
// not computing, so a pool larger than the CPU count keeps the CPUs busy.
func DefaultConcurrency() int { return min(max(16, 32*runtime.NumCPU()), 1024) }

// Parker parks a call the policy gate asked about until people decide.
type Parker interface {
	// Park records the call with the decision that asked and publishes an
	// approval request. The worker then publishes a pending result and
	// acks the call message.
	Park(ctx context.Context, in *events.Call, c *tools.Call, d policy.Decision) error
}

// Worker takes calls from the bus and runs them.
type Worker struct {
	cfg      Config
	nc       *nats.Conn
	js       jetstream.JetStream
	pipe     *tools.Pipeline
	handler  tools.Handler
	log      *slog.Logger
	calls    jetstream.KeyValue
	results  jetstream.Stream
	inflight sync.WaitGroup
	beats    *beater
	source   string // the CloudEvents source of what this worker publishes
	stopping atomic.Bool
	bound    atomic.Bool // the consumer is open: ready for calls
	obs      *observer   // spans, metrics, audit publishing (telemetry.go, audit.go)
	cx       *canceller  // cancellation of calls (cancel.go)

	execCtx    context.Context
	execCancel context.CancelFunc

	eventsFailed, eventsLost atomic.Int64
	retrying                 sync.WaitGroup // event publishes being retried

	// executions counts tool executions started by this worker (tests
	// assert it to prove exactly-once).
	executions atomic.Int64
	onReady    func()
	// beforeAck, when set (tests only), runs after the result is published;
	// returning false skips the ack, as a crash at that point would.
	beforeAck func() bool
}

// New returns a worker over nc running calls through p.
func New(nc *nats.Conn, p *tools.Pipeline, cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	w := &Worker{cfg: cfg, nc: nc, pipe: p, log: cfg.Logger.With("worker", cfg.Name)}
	w.cx = newCanceller(w)
	w.handler = w.cx.wrap(p.Handler())
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncErrHandler(w.asyncFailed),
		jetstream.WithPublishAsyncTimeout(cfg.publishTimeout))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	w.js = js
	w.beats = newBeater(w)
	w.source = "toolgate://worker/" + cfg.Name
	w.execCtx, w.execCancel = context.WithCancel(context.Background())
	w.newObserver()
	return w, nil
}

// Name is the worker's name.
func (w *Worker) Name() string { return w.cfg.Name }

// Executions is how many calls this worker has handed to a tool.
func (w *Worker) Executions() int64 { return w.executions.Load() }

// OnReady sets a function Run calls once the worker takes calls.
func (w *Worker) OnReady(fn func()) { w.onReady = fn }

// Run provisions the bus, announces the registry, and takes calls until ctx
// is done; then it stops taking calls, lets running ones finish within the
// shutdown grace, flushes, and returns nil.
func (w *Worker) Run(ctx context.Context) error {
	if err := bus.Provision(ctx, w.js, w.cfg.Bus); err != nil {
		return err
	}
	var err error
	if w.calls, err = w.js.KeyValue(ctx, bus.BucketCalls); err != nil {
		return fmt.Errorf("open bucket %s: %w", bus.BucketCalls, err)
	}
	if w.results, err = w.js.Stream(ctx, bus.StreamResults); err != nil {
		return fmt.Errorf("open stream %s: %w", bus.StreamResults, err)
	}
	stopCancels, err := w.cx.start(ctx)
	if err != nil {
		return err
	}
	defer stopCancels()
	w.announce(ctx)
	sub, err := w.nc.QueueSubscribe(events.SubjectToolsList, "workers", w.listTools)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", events.SubjectToolsList, err)
	}
	defer sub.Unsubscribe()
	dlq, err := w.deadLetter(ctx)
	if err != nil {
		return fmt.Errorf("consume max-deliveries advisories: %w", err)
	}
	defer func() { dlq.Stop(); <-dlq.Closed() }()

	p := newPuller(w)
	pulling := make(chan error, 1)
	go func() { pulling <- p.run(ctx) }()
	w.bound.Store(true)
	w.log.Info("worker taking calls", "concurrency", w.cfg.Concurrency, "tools", len(w.pipe.Registry().List()))
	if w.onReady != nil {
		w.onReady()
	}
	select {
	case <-ctx.Done():
	case err := <-pulling:
		return fmt.Errorf("take calls: %w", err)
	}
	w.stopping.Store(true)
	<-pulling
	w.shutdown()
	p.slots.Wait()
	return nil
}

func (w *Worker) shutdown() {
	w.log.Info("stopping: finishing running calls", "grace", w.cfg.ShutdownGrace)
	done := make(chan struct{})
	go func() { w.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.cfg.ShutdownGrace):
		w.log.Warn("shutdown grace over: interrupting running calls")
		w.execCancel()
		<-done
	}
	w.execCancel()
	w.drainAudit(w.cfg.publishTimeout)
	w.drainEvents(10 * time.Second)
	if err := w.nc.Flush(); err != nil {
		w.log.Warn("flush", "err", err)
	}
	w.log.Info("worker stopped")
}

// record is what the calls bucket holds per call id: the claim.
type record struct {
	State     string    `json:"state"` // running, parked, executing, done
	Worker    string    `json:"worker"`
	Started   time.Time `json:"started"`
	Heartbeat time.Time `json:"heartbeat"`
	// Result is kept here only when it could not be published, so that
	// the redelivery publishes it instead of reporting interrupted.
	Result *events.ResultData `json:"result,omitempty"`
}

// handle is the whole path of one delivered call, from decoding to the
// ack: the one place to wrap with per-call tracing or metrics.
func (w *Worker) handle(msg callMsg) {
	start := time.Now()
	in, err := events.DecodeCall(msg.Subject(), msg.Headers(), msg.Data(), w.cfg.MaxPayload)
	ctx, done := w.delivery(msg, in)
	defer done()
	if err != nil {
		w.reject(msg, in, err, start)
		return
	}
	key := CallKey(in.Agent, in.ID)
	cl := w.claim(msg, key, start, in.ID)
	stop := func() {}
	res, err := w.run(ctx, in, cl, func() { // claimed: the tool is about to run
		stop = w.heartbeat(msg, key, cl.rev, start)
	})
	if errors.Is(err, jetstream.ErrKeyExists) {
		w.duplicate(msg, in, key)
		return
	}
	if err != nil {
		w.log.Warn("claim failed; will retry", "call_id", in.ID, "err", err)
		retryLater(msg)
		return
	}
	res.DurationMS = tools.Elapsed(start)
	if res.Status == events.StatusPending {
		stop()
		rec, _ := json.Marshal(record{State: stateParked, Worker: w.cfg.Name, Started: start, Heartbeat: time.Now()})
		if _, err := w.calls.Put(w.execCtx, key, rec); err != nil {
			w.log.Warn("mark parked", "call_id", in.ID, "err", err)
		}
		w.publishResult(in, res, false)
		_ = msg.Ack()
		return
	}
	// The heartbeat goes on while the result is published (with retries),
	// so the message is not redelivered meanwhile.
	if err := w.finish(in, key, res, nil, stop); err != nil {
		return // not acked: the redelivery publishes the kept result
	}
	if w.beforeAck != nil && !w.beforeAck() {
		return
	}
	if err := msg.Ack(); err != nil {
		w.log.Warn("ack", "call_id", in.ID, "err", err)
	}
}

// finish publishes the final result and audit. When the result cannot be
// stored even after retries, it is kept in the call's record for the
// redelivery (or the next resume) to publish, and the error returned.
// stop, when set, ends the call's heartbeat once publishing is over.
func (w *Worker) finish(in *events.Call, key string, res events.ResultData, appr *events.ApprovalAudit, stop func()) error {
	err := w.publish(in, res, true, appr)
	if stop != nil {
		stop()
	}
	if err == nil {
		return nil
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

// run executes a decoded call through the pipeline and parks it on ask.
// Nothing runs the call before its claim cl is made: the pipeline waits
// for it once the gate has allowed the call, then claimed is called. A
// call that ends before (refused, denied, parked) waits for it at the end.
// An error means the claim was not made and nothing ran:
// jetstream.ErrKeyExists when the call was claimed before.
func (w *Worker) run(ctx context.Context, in *events.Call, cl *claim, claimed func()) (events.ResultData, error) {
	c := &tools.Call{ID: in.ID, Agent: in.Agent, SessionID: in.Data.SessionID, Name: in.Tool,
		Arguments: in.Data.Arguments, Timeout: time.Duration(in.Data.TimeoutMS) * time.Millisecond, JudgeOnly: in.Data.JudgeOnly}
	c.Progress = w.progress(in, c)
	c.Start = func(context.Context) error {
		if _, err := cl.wait(); err != nil {
			return err
		}
		claimed()
		if !c.JudgeOnly { // a judge-only call stops in the pipeline right after Start
			w.executions.Add(1)
		}
		return nil
	}
	ctx, x := w.startExecute(ctx, in, c, false)
	out, err := w.handler.Handle(ctx, c)
	if _, cerr := cl.wait(); cerr != nil {
		// Not this delivery's call to run (claimed before) or not claimed
		// at all: nothing ran; its span ends without an audit.
		w.recordExecute(ctx, x, c, &events.ResultData{Status: events.StatusError, IsError: true}, cerr)
		return events.ResultData{}, cerr
	}
	res := outcome(c, out, err, w.stopping.Load())
	defer func() { w.endExecute(ctx, x, in, c, &res, err) }()
	var pe *tools.PolicyError
	if errors.As(err, &pe) && !isClarify(pe) {
		w.violation(in, c, pe)
	}
	if res.Status == events.StatusPending {
		if w.cfg.Parker == nil {
			res.Status, res.IsError = events.StatusDenied, true
			res.Output = "approval required, but this worker has no approvals configured: " + err.Error()
			return res, nil
		}
		if perr := w.cfg.Parker.Park(ctx, in, c, pe.Decision); perr != nil {
			w.log.Error("park failed", "call_id", in.ID, "err", perr)
			res.Status, res.IsError, res.Error = events.StatusError, true, events.CodeInternal
			res.Output = "could not park the call for approval: " + perr.Error()
			return res, nil
		}
		w.cx.afterPark(ctx, in)
		res.Output = "waiting for approval: " + pe.Decision.Reason
		if isClarify(pe) {
			res.Output = "waiting for an answer: " + pe.Decision.Reason
		}
	}
	return res, nil
}

func isClarify(pe *tools.PolicyError) bool { return pe.Decision.Rule == papproval.ClarifyRule }

func (w *Worker) ackWait() time.Duration {
	if w.cfg.Bus.AckWait > 0 {
		return w.cfg.Bus.AckWait
	}
	return 30 * time.Second
}

// duplicate handles a call id that was already claimed: the stored result
// is published again; a claim whose owner stopped heartbeating is reported
// as interrupted (never run twice); a live claim is left to its owner.
func (w *Worker) duplicate(msg callMsg, in *events.Call, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	raw, err := w.results.GetLastMsgForSubject(ctx, events.ResultSubject(in.Agent, in.ID))
	if err == nil {
		var res events.ResultData
		if _, derr := events.DecodeData(raw.Header, raw.Data, &res); derr == nil {
			w.log.Info("duplicate call: republishing stored result", "call_id", in.ID, "status", res.Status)
			w.publishResult(in, res, false)
			_ = msg.Ack()
			return
		}
	}
	entry, err := w.calls.Get(ctx, key)
	if err != nil {
		retryLater(msg)
		return
	}
	var rec record
	_ = json.Unmarshal(entry.Value(), &rec)
	if rec.State == stateDone && rec.Result != nil {
		// The result could not be published before; publish it now.
		if w.publish(in, *rec.Result, true, nil) == nil {
			_ = msg.Ack()
		}
		return
	}
	if rec.State == stateParked {
		// Parked, but its pending result was never stored: say it again.
		w.publishResult(in, events.ResultData{CallID: in.ID, Agent: in.Agent, Tool: in.Tool, SessionID: in.Data.SessionID,
			Status: events.StatusPending, Output: "waiting for approval"}, false)
		_ = msg.Ack()
		return
	}
	if time.Since(rec.Heartbeat) > 2*w.ackWait() {
		w.log.Warn("call claimed by a worker that stopped; reporting interrupted", "call_id", in.ID, "owner", rec.Worker)
		res := events.ResultData{CallID: in.ID, Agent: in.Agent, Tool: in.Tool, SessionID: in.Data.SessionID,
			Status: events.StatusInterrupted, IsError: true,
			Output: fmt.Sprintf("interrupted: worker %s stopped while running this call; it is not run again", rec.Worker)}
		w.publishResult(in, res, true)
		_ = msg.Ack()
		return
	}
	// The owner is alive, heartbeating this very message (this copy was
	// delivered here too, say after waiting in a pull buffer): leave it.
	// Naking it would hand it on while the owner still works on it.
}

// reject answers a message that could not be decoded: an error result on
// the agent's result subject when there is an agent to answer, an audit
// event, and the message terminated so it never blocks the queue.
func (w *Worker) reject(msg callMsg, in *events.Call, err error, start time.Time) {
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
	_ = msg.TermWithReason(code)
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
// came in and, when audit is set, the audit event. It waits until the
// result is stored, retrying with backoff (a stream leader change takes a
// second or two); the dedup id makes a retry harmless.
func (w *Worker) publish(in *events.Call, res events.ResultData, audit bool, appr *events.ApprovalAudit) error {
	res.Agent = in.Agent
	id := CallKey(in.Agent, in.ID) + ":" + string(res.Status)
	if res.Status.Final() {
		id = CallKey(in.Agent, in.ID) + ":result"
	}
	m, err := events.EncodeData(events.ResultSubject(in.Agent, in.ID), events.Attrs{ID: id, Source: w.source,
		Type: events.TypeCallCompleted, Subject: in.ID, TraceParent: in.TraceParent}, res, in.Mode)
	if err != nil {
		return err
	}
	f, err := w.js.PublishMsgAsync(m)
	if audit {
		w.audit(in, res, appr)
	}
	if err == nil {
		// The JetStream context fails an async publish not acknowledged
		// within w.cfg.publishTimeout.
		select {
		case <-f.Ok():
			return nil
		case err = <-f.Err():
		}
	}
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

// Publishing a result: attempts, and how long each waits for its ack.
const publishAttempts = 5

// defaultPublishTimeout is how long a publish waits for its ack unless
// the configuration (tests) says otherwise.
const defaultPublishTimeout = 5 * time.Second

func (w *Worker) violation(in *events.Call, c *tools.Call, pe *tools.PolicyError) {
	d := pe.Decision
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

// announce publishes a registered event for every tool, and registry
// changes from now on.
func (w *Worker) announce(ctx context.Context) {
	// Watch first: a tool registered meanwhile (an MCP server connecting)
	// may be announced twice, never missed.
	w.pipe.Registry().Watch(func(ch tools.Change) {
		typ := events.TypeToolRegistered
		if ch.Kind == tools.Unregistered {
			typ = events.TypeToolUnregistered
		}
		w.toolEvent(typ, ch.Tool)
	})
	for _, t := range w.pipe.Registry().List() {
		w.toolEvent(events.TypeToolRegistered, t)
	}
}

func (w *Worker) toolEvent(typ string, t *tools.Tool) {
	w.publishEvent(events.ToolEventSubject(t.Name), nuid.Next(), typ, ToolData(t, w.cfg.Name))
}

// ToolData describes t for registry events and listings.
func ToolData(t *tools.Tool, worker string) events.ToolData {
	return events.ToolData{Name: t.Name, Aliases: t.Aliases, Description: t.Description, Kind: string(t.Kind),
		Version: t.Version, Parameters: t.Parameters, Worker: worker}
}

func (w *Worker) listTools(m *nats.Msg) {
	var req events.ToolsListRequest
	if len(m.Data) > 0 {
		_ = json.Unmarshal(m.Data, &req) // a bad body lists everything: calls are judged anyway
	}
	var out []events.ToolData
	for _, t := range w.pipe.Registry().List() {
		if req.Agent != "" && w.pipe.DeniedOutright(req.Agent, t) {
			continue
		}
		out = append(out, ToolData(t, w.cfg.Name))
	}
	b, _ := json.Marshal(out)
	_ = m.Respond(b)
}

// CallKey is the calls-bucket key of a call: the agent and the call id when
// the id is a safe key token, else a hash of it.
func CallKey(agent, id string) string {
	if safeKey(id) {
		return agent + "." + id
	}
	sum := sha256.Sum256([]byte(id))
	return agent + ".h" + hex.EncodeToString(sum[:16])
}

func safeKey(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '=') {
			return false
		}
	}
	return true
}

func tokenOr(s, def string) string {
	if events.ValidToken(s) != nil {
		return def
	}
	return s
}
