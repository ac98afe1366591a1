package telemetry

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metric attribute keys (Prometheus labels).
const (
	LabelTool    = attribute.Key("tool")
	LabelOutcome = attribute.Key("outcome")
	LabelResult  = attribute.Key("result")
	LabelKind    = attribute.Key("kind")
	// LabelConsumer names a JetStream consumer, LabelFate what became of
	// a message it delivered (ack, retry, term, leave).
	LabelConsumer = attribute.Key("consumer")
	LabelFate     = attribute.Key("fate")
)

// UnknownTool is the tool label of calls that named no registered tool:
// the label takes only registered names, so an agent cannot grow the
// metrics without bound by calling made-up tools.
const UnknownTool = "_unknown"

// WorkerMetrics are a worker's instruments. In Prometheus text the names
// read toolgate_calls_total, toolgate_call_duration_seconds, ...
type WorkerMetrics struct {
	// Calls counts calls that reached a final status, by tool and outcome
	// (the result's status).
	Calls metric.Int64Counter
	// Duration is the time a call spent in the pipeline (validation,
	// policy, the tool), by tool.
	Duration metric.Float64Histogram
	// Redeliveries counts call deliveries after the first.
	Redeliveries metric.Int64Counter
	// DeadLetters counts calls moved to the dead-letter stream.
	DeadLetters metric.Int64Counter
	// PolicyReloads counts policy documents applied or rejected (result).
	PolicyReloads metric.Int64Counter
	// SandboxFailures counts bash commands that could not be started.
	SandboxFailures metric.Int64Counter
	// AuditFailures counts failed audit publishes (each is retried), and
	// AuditLost the audit events given up on after every retry.
	AuditFailures metric.Int64Counter
	AuditLost     metric.Int64Counter
	// Settled counts messages the worker's consumers settled, by consumer
	// and fate.
	Settled metric.Int64Counter
	// AgentRefused counts agents' requests refused because the agent
	// reached a per-agent bound, by bound.
	AgentRefused metric.Int64Counter
}

// DurationBuckets are the call-duration histogram's bucket bounds in
// seconds: from a sub-millisecond read to a ten-minute command.
var DurationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// NewWorkerMetrics creates the worker's instruments on t's meter.
func NewWorkerMetrics(t *Telemetry) (*WorkerMetrics, error) {
	m := t.OrDisabled().Meter
	var errs [10]error
	w := &WorkerMetrics{}
	w.Calls, errs[0] = m.Int64Counter("toolgate.calls", metric.WithUnit("{call}"),
		metric.WithDescription("Calls that reached a final status, by tool and outcome."))
	w.Duration, errs[1] = m.Float64Histogram("toolgate.call.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a call spent in the pipeline: validation, policy and the tool."),
		metric.WithExplicitBucketBoundaries(DurationBuckets...))
	w.Redeliveries, errs[2] = m.Int64Counter("toolgate.redeliveries", metric.WithUnit("{delivery}"),
		metric.WithDescription("Call deliveries after the first (a lost ack, a worker that died)."))
	w.DeadLetters, errs[3] = m.Int64Counter("toolgate.dead_letters", metric.WithUnit("{call}"),
		metric.WithDescription("Calls moved to the dead-letter stream after their last delivery."))
	w.PolicyReloads, errs[4] = m.Int64Counter("toolgate.policy.reloads", metric.WithUnit("{reload}"),
		metric.WithDescription("Policy documents applied or rejected, by result."))
	w.SandboxFailures, errs[5] = m.Int64Counter("toolgate.sandbox.failures", metric.WithUnit("{call}"),
		metric.WithDescription("bash commands that could not be started (sandbox or process set-up failed)."))
	w.AuditFailures, errs[6] = m.Int64Counter("toolgate.audit.publish_failures", metric.WithUnit("{event}"),
		metric.WithDescription("Audit events whose publish failed and was retried."))
	w.AuditLost, errs[7] = m.Int64Counter("toolgate.audit.lost", metric.WithUnit("{event}"),
		metric.WithDescription("Audit events not stored after every retry."))
	w.Settled, errs[8] = m.Int64Counter("toolgate.messages.settled", metric.WithUnit("{message}"),
		metric.WithDescription("Messages the worker's consumers settled, by consumer and fate (ack, retry, term, leave)."))
	w.AgentRefused, errs[9] = m.Int64Counter("toolgate.agent.requests_refused", metric.WithUnit("{request}"),
		metric.WithDescription("Agents' requests refused because the agent reached a per-agent bound, by bound."))
	return w, errors.Join(errs[:]...)
}

// Gauge registers an observable gauge read by fn at each collection; fn
// returns false when it has no value to report.
func (t *Telemetry) Gauge(name, unit, desc string, fn func(ctx context.Context) (int64, bool)) error {
	_, err := t.OrDisabled().Meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc),
		metric.WithInt64Callback(func(ctx context.Context, o metric.Int64Observer) error {
			if v, ok := fn(ctx); ok {
				o.Observe(v)
			}
			return nil
		}))
	return err
}

// ApproverMetrics are the approver service's instruments.
type ApproverMetrics struct {
	// Decisions counts decisions published, by outcome.
	Decisions metric.Int64Counter
	// Latency is how long a call waited for the decision: from parking to
	// the person's decision.
	Latency metric.Float64Histogram
}

// LatencyBuckets are the decision-latency histogram's bounds in seconds.
var LatencyBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600}

// NewApproverMetrics creates the approver's instruments on t's meter.
func NewApproverMetrics(t *Telemetry) (*ApproverMetrics, error) {
	m := t.OrDisabled().Meter
	a := &ApproverMetrics{}
	var e1, e2 error
	a.Decisions, e1 = m.Int64Counter("toolgate.approver.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions people made through this approver, by outcome."))
	a.Latency, e2 = m.Float64Histogram("toolgate.approver.decision.latency", metric.WithUnit("s"),
		metric.WithDescription("Time from a call being parked to a person's decision."),
		metric.WithExplicitBucketBoundaries(LatencyBuckets...))
	return a, errors.Join(e1, e2)
}
