package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/fate"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tooldef"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// observer is the worker's telemetry: its tracer, its instruments and its
// audit publishing.
type observer struct {
	t *telemetry.Telemetry
	m *telemetry.WorkerMetrics
	auditQueue
}

func (w *Worker) newObserver() {
	t := w.cfg.Telemetry.OrDisabled()
	m, err := telemetry.NewWorkerMetrics(t)
	if err != nil {
		w.log.Warn("telemetry: instruments", "err", err)
	}
	w.obs = &observer{t: t, m: m}
}

// countFate counts a settled message of one of the worker's consumers.
func (w *Worker) countFate(consumer string, f fate.Fate) {
	w.obs.m.Settled.Add(context.Background(), 1, metric.WithAttributeSet(attribute.NewSet(
		telemetry.LabelConsumer.String(consumer), telemetry.LabelFate.String(f.Kind.String()))))
}

// agentRefused counts an agent's request refused at a per-agent bound.
func (w *Worker) agentRefused(bound string) {
	w.obs.m.AgentRefused.Add(context.Background(), 1, metric.WithAttributes(attribute.String("bound", bound)))
}

// Span names. A call message's delivery is a messaging process span; the
// call's run through the pipeline an execute_tool span (GenAI conventions).
const (
	spanProcessCall     = "process toolgate.call.{agent}.{tool}"
	spanProcessDecision = "process toolgate.approval.decision.{call_id}"
	spanExecute         = "execute_tool"
	// toolType is gen_ai.tool.type: toolgate's tools are functions the
	// model calls, run on its behalf.
	toolType = "function"
)

// delivery starts the CONSUMER process span of a call message, continuing
// the trace of the call's traceparent, counts a redelivery, and tracks the
// call's ids for its log lines. done ends the span.
func (w *Worker) delivery(msg callMsg, in *events.Call) (ctx context.Context, done func()) {
	o := w.obs
	ctx = o.t.Extract(w.execCtx, in.TraceParent, in.TraceState)
	if !o.t.Tracing && !o.t.Metering {
		// Nothing recorded: only the caller's trace context flows on, to
		// the parked record and the log lines.
		untrack := telemetry.Track(in.ID, trace.SpanContextFromContext(ctx))
		return ctx, func() { w.flushDecision(in); untrack() }
	}
	delivered := msg.NumDelivered()
	if delivered > 1 {
		o.m.Redeliveries.Add(ctx, 1)
	}
	ctx, span := o.t.Tracer.Start(ctx, spanProcessCall, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(
			telemetry.KeyMsgSystem.String(telemetry.MessagingSystem),
			telemetry.KeyMsgOperationName.String("process"), telemetry.MsgOperationProcess,
			telemetry.KeyMsgDestination.String(msg.Subject()),
			telemetry.KeyMsgTemplate.String("toolgate.call.{agent}.{tool}"),
			telemetry.KeyMsgConsumerGroup.String(bus.ConsumerWorkers),
			telemetry.KeyMsgID.String(in.ID),
			telemetry.KeyMsgBodySize.Int(len(msg.Data())),
			telemetry.KeyMsgDeliveryCount.Int64(int64(delivered)),
			telemetry.KeyAgent.String(in.Agent),
			telemetry.KeyWorker.String(w.cfg.Name))
	}
	untrack := telemetry.Track(in.ID, span.SpanContext())
	return ctx, func() { w.flushDecision(in); untrack(); span.End() }
}

// execution is one run of a call through the pipeline.
type execution struct {
	span     trace.Span
	start    time.Time
	resumed  bool
	untraced bool // span is the context's, not ours to end
}

// startExecute starts the execute_tool span of c, a child of ctx's span.
func (w *Worker) startExecute(ctx context.Context, in *events.Call, c *tools.Call, resumed bool) (context.Context, *execution) {
	if !w.obs.t.Tracing {
		return ctx, &execution{span: trace.SpanFromContext(ctx), start: time.Now(), resumed: resumed, untraced: true}
	}
	ctx, span := w.obs.t.Tracer.Start(ctx, spanExecute, trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(telemetry.OperationExecuteTool,
			telemetry.KeyToolName.String(in.Tool),
			telemetry.KeyToolCallID.String(in.ID),
			telemetry.KeyToolType.String(toolType),
			telemetry.KeyAgent.String(in.Agent),
			telemetry.KeyWorker.String(w.cfg.Name))
		if in.Data.SessionID != "" {
			span.SetAttributes(telemetry.KeyConversationID.String(in.Data.SessionID))
		}
		if resumed {
			span.SetAttributes(telemetry.KeyResumed.Bool(true))
		}
		if w.obs.t.CaptureContent {
			span.SetAttributes(telemetry.KeyToolArguments.String(string(in.Data.Arguments)))
		}
	}
	return ctx, &execution{span: span, start: time.Now(), resumed: resumed}
}

// endExecute ends the execute_tool span with the call's outcome, records
// its duration, counts a sandbox failure, and audits the gate's decision.
func (w *Worker) endExecute(ctx context.Context, x *execution, in *events.Call, c *tools.Call, res *events.ResultData, err error) {
	if c.Decision != nil {
		w.auditDecision(ctx, in, res, c.Decision, x)
	}
	w.recordExecute(ctx, x, c, res, err)
}

// recordExecute ends the execute_tool span and records the run's metrics.
func (w *Worker) recordExecute(ctx context.Context, x *execution, c *tools.Call, res *events.ResultData, err error) {
	tool := w.toolLabel(c)
	if w.obs.t.Metering {
		w.obs.m.Duration.Record(ctx, time.Since(x.start).Seconds(), metric.WithAttributeSet(attribute.NewSet(telemetry.LabelTool.String(tool))))
	}
	if tool == tooldef.Bash.Name && sandboxFailed(res, err) {
		w.obs.m.SandboxFailures.Add(ctx, 1)
	}
	if x.untraced {
		return
	}
	span := x.span
	if span.IsRecording() {
		if c.Tool != nil {
			span.SetName(spanExecute + " " + c.Tool.Name)
			span.SetAttributes(telemetry.KeyToolName.String(c.Tool.Name))
		}
		span.SetAttributes(telemetry.KeyStatus.String(string(res.Status)))
		if et := errorType(res); et != "" {
			span.SetAttributes(telemetry.KeyErrorType.String(et))
			span.SetStatus(codes.Error, et)
		}
		if w.obs.t.CaptureContent {
			span.SetAttributes(telemetry.KeyToolResult.String(res.Output))
		}
	}
	span.End()
}

// sandboxFailed reports whether a bash call's command could not be
// started, or bubblewrap failed to set its sandbox up.
func sandboxFailed(res *events.ResultData, err error) bool {
	return errors.Is(err, bash.ErrStart) || (err == nil && bash.SandboxFailed(res.Metadata))
}

// errorType is the error.type of a failed call: the result's error code,
// else its status (denied, timeout, ...); a tool that reported an error
// is tool_error. Empty for a success or a parked call.
func errorType(res *events.ResultData) string {
	switch {
	case !res.IsError:
		return ""
	case res.Error != "":
		return res.Error
	case res.Status == events.StatusError:
		return "tool_error"
	}
	return string(res.Status)
}

// toolLabel is the tool's metric label: a registered tool's name, else
// UnknownTool.
func (w *Worker) toolLabel(c *tools.Call) string {
	if c != nil && c.Tool != nil {
		return c.Tool.Name
	}
	return telemetry.UnknownTool
}

// labelOf is the metric label of a tool named in a result.
func (w *Worker) labelOf(name string) string {
	if t, ok := w.pipe.Registry().Get(name); ok {
		return t.Name
	}
	return telemetry.UnknownTool
}

// countOutcome counts a call that reached a final status.
func (w *Worker) countOutcome(ctx context.Context, res *events.ResultData) {
	if !w.obs.t.Metering {
		return
	}
	w.obs.m.Calls.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(
		telemetry.LabelTool.String(w.labelOf(res.Tool)), telemetry.LabelOutcome.String(string(res.Status)))))
}

// resumeSpan starts the CONSUMER span of a decided parked call's resume:
// a child of the span that parked the call (so the approver's decision,
// itself a child of that span, and the resumed run share its trace), with
// a link to ctx's span when the decision's trace context came with it.
func (w *Worker) resumeSpan(ctx context.Context, in *events.Call, parkedSpan, outcome string, approvers []string) (context.Context, func()) {
	link := trace.SpanContextFromContext(ctx)
	parent := w.obs.t.Extract(w.execCtx, parkedSpan, "")
	if parkedSpan == "" {
		parent = w.obs.t.Extract(w.execCtx, in.TraceParent, in.TraceState)
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	if link.IsValid() && link.TraceID() != trace.SpanContextFromContext(parent).TraceID() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: link}))
	}
	_, span := w.obs.t.Tracer.Start(parent, spanProcessDecision, opts...)
	if span.IsRecording() {
		span.SetAttributes(
			telemetry.KeyMsgSystem.String(telemetry.MessagingSystem),
			telemetry.KeyMsgOperationName.String("process"), telemetry.MsgOperationProcess,
			telemetry.KeyMsgDestination.String(events.ApprovalDecisionSubject(in.ID)),
			telemetry.KeyMsgTemplate.String("toolgate.approval.decision.{call_id}"),
			telemetry.KeyMsgID.String(in.ID),
			telemetry.KeyAgent.String(in.Agent),
			telemetry.KeyApprovalResult.String(outcome),
			telemetry.KeyApprover.StringSlice(approvers),
			telemetry.KeyWorker.String(w.cfg.Name))
	}
	untrack := telemetry.Track(in.ID, span.SpanContext())
	return trace.ContextWithSpan(ctx, span), func() { w.flushDecision(in); untrack(); span.End() }
}

// Ready reports whether the worker takes calls: connected to NATS, its
// consumer bound, and not stopping.
func (w *Worker) Ready() error {
	switch {
	case w.stopping.Load():
		return errors.New("draining: not taking calls")
	case !w.nc.IsConnected():
		return errors.New("not connected to NATS: " + w.nc.Status().String())
	case !w.bound.Load():
		return errors.New("provisioning: the workers consumer is not bound yet")
	}
	if n, oldest := w.AuditBacklog(); n > 0 && oldest > w.cfg.publishTimeout {
		return fmt.Errorf("audit stream not storing: %d calls wait for their audit events (the oldest %s); at %d the worker takes no more calls",
			n, oldest.Round(time.Second), w.cfg.Concurrency)
	}
	return nil
}

// AuditBacklog is how many calls that ran wait for their audit events
// to be stored, and how long the oldest has waited. Each holds its slot
// until they are, so at most Concurrency calls do; then the worker takes
// no more calls (auditwait.go).
func (w *Worker) AuditBacklog() (calls int, oldest time.Duration) {
	return w.obs.auditQueue.backlog()
}

// countPolicyReload counts a policy document applied or rejected.
func (w *Worker) countPolicyReload(applied bool) {
	result := "rejected"
	if applied {
		result = "applied"
	}
	w.obs.m.PolicyReloads.Add(context.Background(), 1, metric.WithAttributeSet(attribute.NewSet(telemetry.LabelResult.String(result))))
}
