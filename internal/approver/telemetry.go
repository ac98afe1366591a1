package approver

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/parking"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
)

// observer is the approver's telemetry.
type observer struct {
	t *telemetry.Telemetry
	m *telemetry.ApproverMetrics
}

func newObserver(t *telemetry.Telemetry, log interface{ Warn(string, ...any) }) *observer {
	t = t.OrDisabled()
	m, err := telemetry.NewApproverMetrics(t)
	if err != nil {
		log.Warn("telemetry: instruments", "err", err)
	}
	return &observer{t: t, m: m}
}

// spanDecision names the span of a person's decision.
const spanDecision = "decide {call_id}"

// startDecision starts the span of identity's decision on p, continuing
// the trace of the span that parked the call, so that the decision and
// the resumed run join the call's trace.
func (s *Server) startDecision(ctx context.Context, p *parking.Parked, identity string, outcome approval.Outcome) (context.Context, trace.Span) {
	parent := ctx
	if tp := p.Meta[telemetry.MetaSpan]; tp != "" {
		parent = s.obs.t.Extract(ctx, tp, "")
	} else if tp := p.Meta["traceparent"]; tp != "" {
		parent = s.obs.t.Extract(ctx, tp, p.Meta["tracestate"])
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && sc.TraceID() != trace.SpanContextFromContext(parent).TraceID() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc})) // the request that carried the decision
	}
	pctx, span := s.obs.t.Tracer.Start(parent, spanDecision, opts...)
	if span.IsRecording() {
		span.SetAttributes(
			telemetry.KeyMsgSystem.String(telemetry.MessagingSystem),
			telemetry.KeyMsgOperationName.String("send"), telemetry.MsgOperationSend,
			telemetry.KeyMsgDestination.String(events.ApprovalDecisionSubject(p.CallID)),
			telemetry.KeyMsgTemplate.String("toolgate.approval.decision.{call_id}"),
			telemetry.KeyToolCallID.String(p.CallID),
			telemetry.KeyToolName.String(p.Tool),
			telemetry.KeyAgent.String(p.Agent),
			telemetry.KeyApprover.String(identity),
			telemetry.KeyApprovalResult.String(string(outcome)),
			telemetry.KeyPolicyRule.String(p.Decision.Rule),
			telemetry.KeyPolicyRevision.String(p.Decision.Revision))
		if p.SessionID != "" {
			span.SetAttributes(telemetry.KeyConversationID.String(p.SessionID))
		}
	}
	return pctx, span
}

// decided counts a published decision and how long the call waited for it.
func (s *Server) decided(ctx context.Context, p *parking.Parked, outcome approval.Outcome, at time.Time) {
	s.obs.m.Decisions.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(telemetry.LabelOutcome.String(string(outcome)))))
	if !p.ParkedAt.IsZero() {
		s.obs.m.Latency.Record(ctx, max(at.Sub(p.ParkedAt).Seconds(), 0),
			metric.WithAttributeSet(attribute.NewSet(telemetry.LabelOutcome.String(string(outcome)))))
	}
}

// Ready reports whether the service can take decisions: connected to NATS.
func (s *Server) Ready() error {
	if !s.nc.IsConnected() {
		return errors.New("not connected to NATS: " + s.nc.Status().String())
	}
	return nil
}
