// Package worker runs toolgate's call loop: it takes calls from the shared
// JetStream consumer as slots of its bounded pool free up, claims each
// call id once, runs it through the parking step and the tool pipeline,
// and publishes the result, the audit event and the policy violations.
//
// Each delivered call is handled by handle (runner.go), which returns the
// message's fate (internal/fate); the slot that took the message applies
// it (settle). Nothing else acks, naks or terms a call message.
//
// Files, one job each: worker.go (configuration, start and stop),
// pull.go (taking calls), runner.go (one call from message to fate),
// outcome.go (pipeline outcome to result status), park.go (the parking
// step), approvals.go (resuming parked calls), claim.go and heartbeat.go
// (the claim record and keeping it alive), redelivery.go (a call claimed
// before), publish.go (results and events), audit.go, auditwait.go (a
// call finished only once its audit is stored), chain.go (the audit
// chain and its checkpoints), deadletter.go,
// announce.go (tool announcements and listings), callkey.go, asyncpub.go
// (event publishes retried), telemetry.go (spans and metrics).
package worker

import (
	"context"
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

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/fate"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/eventsig"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/trust"
)

// Config tunes a Worker. The zero value of each field means its default.
type Config struct {
	// Name identifies this worker in results and audit; default host-pid.
	Name string
	// Concurrency bounds the calls this worker runs at once; default
	// DefaultConcurrency().
	Concurrency int
	// AgentConcurrency bounds the calls of one agent this worker runs at
	// once, so that other agents' calls find free slots (fair.go); its
	// calls over it wait for their turn. Default three quarters of
	// Concurrency; negative means no bound. A policy budget's
	// max_concurrent still refuses calls beyond its own limit.
	AgentConcurrency int
	// MaxPayload bounds a call's message data in bytes; default 1 MiB.
	MaxPayload int
	// MaxQueuedCalls bounds the calls of one agent in the calls stream
	// (queued, or waiting out their agent's bounds) past which the
	// worker's intake refuses the agent's calls (queued.go); default
	// DefaultMaxQueuedCalls, negative means no bound.
	MaxQueuedCalls int
	// ShutdownGrace is how long running calls may finish after a stop
	// signal before they are interrupted; default 30s.
	ShutdownGrace time.Duration
	// Bus is the stream, consumer and bucket configuration provisioned at
	// start.
	Bus bus.Config
	// Parker parks calls that wait for people (the gate asked, or a tool
	// asks a question); nil means such a call is refused.
	Parker Parker
	// Logger receives the worker's logs; default slog.Default().
	Logger *slog.Logger
	// Telemetry traces and measures the calls; nil records nothing.
	Telemetry *telemetry.Telemetry
	// Budgeted reports whether a budget applies to a call the gate
	// allowed (budget.Enforcer.Applies). A pure call it applies to is
	// claimed like any other, so that one call id runs, and is charged,
	// once whatever the Nats-Msg-Ids of its messages; nil: none applies.
	Budgeted func(*tools.Call) bool
	// Signer signs the results and audit events the worker publishes
	// (its worker credentials' key and JWT); without a key they go out
	// unsigned, and every reader refuses them.
	Signer trust.Signer
	// Verifier checks a stored result before it counts as the call's
	// ("finished before", on a redelivery or a resume); nil refuses
	// every stored result.
	Verifier *eventsig.Verifier
	// Redact removes secrets from the gate's view of a call before the
	// audit keeps it (the worker's redaction, knowing its credentials);
	// the built-in secret formats are removed whatever it does.
	Redact func(string) (string, []string)

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
	if c.AgentConcurrency == 0 {
		c.AgentConcurrency = defaultAgentShare(c.Concurrency)
	}
	if c.MaxPayload <= 0 {
		c.MaxPayload = 1 << 20
	}
	if c.MaxQueuedCalls == 0 {
		c.MaxQueuedCalls = DefaultMaxQueuedCalls
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

// Worker takes calls from the bus and runs them.
type Worker struct {
	cfg Config
	nc  *nats.Conn
	js  jetstream.JetStream
	// answering holds, per agent, the lock one task answer of the agent
	// takes through the intake (intake.go).
	answering sync.Map
	// queued is the intake's per-agent quota of queued calls (queued.go).
	queued *queuedQuota
	// intakeLogged is when the intake last logged a refusal it could
	// not answer (Unix nanoseconds; refuseIntake).
	intakeLogged atomic.Int64
	// schedules: calls over their agent's bounds wait as message
	// schedules of the calls stream (wait.go), read once at Run.
	schedules bool
	pipe      *tools.Pipeline
	handler   tools.Handler // the pipeline's handler
	settler   fate.Runner   // applies the fates handle returns
	log       *slog.Logger
	calls     jetstream.KeyValue
	results   jetstream.Stream
	inflight  sync.WaitGroup
	running   atomic.Int64 // calls the puller's slots are handling
	beats     *beater
	boxes     *replyBoxes // reply subjects for claim and result acknowledgements (replies.go)
	source    string      // the CloudEvents source of what this worker publishes
	stopping  atomic.Bool
	bound     atomic.Bool // the consumer is open: ready for calls
	obs       *observer   // spans, metrics, audit publishing (telemetry.go, audit.go)
	cx        *canceller  // cancellation of calls (cancel.go)

	execCtx    context.Context
	execCancel context.CancelFunc

	eventsFailed, eventsLost atomic.Int64
	decisions                sync.Map       // *events.Call -> *pendingDecision (audit.go)
	retrying                 sync.WaitGroup // event publishes being retried

	// executions counts tool executions started by this worker (tests
	// assert it to prove exactly-once).
	executions atomic.Int64
	// handedBack counts calls a stopping worker handed back unrun.
	handedBack atomic.Int64
	// chain is the audit chain this worker run writes (chain.go).
	chain auditChain
	// auditGiveUp is closed when the worker stops retrying audit
	// publishes (the end of its shutdown grace); unaudited are the
	// records of the calls it left unacked for want of them, and
	// unauditedMsgs their messages, handed back once the records are
	// complete (auditwait.go).
	auditGiveUp     chan struct{}
	graceOver       chan struct{} // the shutdown grace is over: finishes stop waiting for their audit
	auditGiveUpOnce sync.Once
	unauditedMu     sync.Mutex
	unaudited       map[string]record
	unauditedMsgs   []deliveredMsg
	auditRecreated  atomic.Int64 // when the audit stream was last looked for, unix ns (recreateAudit)
	// forged counts stored results refused by the verifier.
	forged atomic.Int64
	// sign signs checkpoints (cfg.Signer), signBatch results and audit
	// events, those of a call's result together; nil: unsigned.
	sign      events.SignFunc
	signBatch eventsig.SignBatch
	// group signs final publishes together (groupSigner); nil unsigned.
	group   *groupSigner
	onReady func()
	// beforeAck, when set (tests only), runs before a call message is
	// acked; returning false skips the ack, as a crash at that point
	// would.
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
	w.settler = fate.Runner{Consumer: bus.ConsumerWorkers, Logger: w.log, Count: w.countFate}
	w.beats = newBeater(w)
	w.boxes = newReplyBoxes(nc, cfg.Concurrency+16, &w.running)
	w.source = "toolgate://worker/" + cfg.Name
	w.sign, w.signBatch = eventsig.Sign(cfg.Signer), eventsig.SignTogether(cfg.Signer)
	w.group = newGroupSigner(w.signBatch, signLinger)
	w.execCtx, w.execCancel = context.WithCancel(context.Background())
	w.auditGiveUp, w.graceOver = make(chan struct{}), make(chan struct{})
	w.newObserver()
	w.queued = newQueuedQuota(cfg.MaxQueuedCalls, w.queuedCounter(), time.Now,
		func() { w.agentRefused(boundQueuedCalls) }, w.log)
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
	w.useSchedules(ctx)
	if err := w.obs.t.Gauge("toolgate.calls.scheduled", "{call}", "Calls over their agent's fair-share bounds waiting as message schedules of the calls stream, outside the workers consumer (read at most every 10 s).",
		w.newWaitingCalls().count); err != nil {
		w.log.Warn("telemetry: gauge of scheduled calls", "err", err)
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
	stopIntake, err := w.serveIntake()
	if err != nil {
		return err
	}
	defer stopIntake()
	w.announce(ctx)
	sub, err := w.nc.QueueSubscribe(events.SubjectToolsList, "workers", w.listTools)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", events.SubjectToolsList, err)
	}
	defer sub.Unsubscribe()
	own, err := w.nc.QueueSubscribe(events.ToolsListSubject("*"), "workers", w.listTools)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", events.ToolsListSubject("*"), err)
	}
	defer own.Unsubscribe()
	stopAPI, err := w.serveAgentAPI()
	if err != nil {
		return err
	}
	defer stopAPI()
	dlq, err := w.deadLetter(ctx)
	if err != nil {
		return fmt.Errorf("consume max-deliveries advisories: %w", err)
	}
	defer func() { dlq.Stop(); <-dlq.Closed() }()

	stopChain := make(chan struct{})
	defer close(stopChain)
	w.openChain(ctx, stopChain)
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

// shutdown lets running calls finish, and their audit events be stored,
// within the shutdown grace. A call still running at its end is
// interrupted; a call whose audit events are still not stored is left
// unacked with them kept in its record (awaitAudit), and so is the
// chain's closing checkpoint when it cannot be stored either; then those
// calls are handed back (handBackUnaudited).
func (w *Worker) shutdown() {
	w.log.Info("stopping: finishing running calls", "grace", w.cfg.ShutdownGrace)
	deadline := time.Now().Add(w.cfg.ShutdownGrace)
	done := make(chan struct{})
	go func() { w.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.cfg.ShutdownGrace):
		w.log.Warn("shutdown grace over: interrupting running calls; audit events not stored by now are kept for the redelivery")
		w.execCancel()
		close(w.graceOver)
		<-done
	}
	w.execCancel()
	// The chain's last events are vouched for by its closing checkpoint,
	// stored within what is left of the grace (at least a publish
	// timeout), else kept with the calls left unaudited.
	if closing := w.flushCheckpoint(); closing != nil && !w.awaitClosing(later(deadline, time.Now().Add(w.cfg.publishTimeout))) {
		if !w.keepCheckpoint(closing) {
			w.log.Error("closing audit checkpoint not stored: the chain ends without it", "chain", w.chain.id)
		}
	}
	w.handBackUnaudited()
	w.drainAudit(time.Now())
	w.stopAuditAcks()
	w.beats.stop()
	w.drainEvents(10 * time.Second)
	w.boxes.close()
	if err := w.nc.Flush(); err != nil {
		w.log.Warn("flush", "err", err)
	}
	w.log.Info("worker stopped")
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (w *Worker) ackWait() time.Duration {
	if w.cfg.Bus.AckWait > 0 {
		return w.cfg.Bus.AckWait
	}
	return 30 * time.Second
}
