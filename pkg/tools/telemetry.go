package tools

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/pkg/policy"
)

// EventPolicyDecision is the name of the span event the gate's decision is
// recorded as on the span of the call's context (execute_tool), with the
// attributes toolgate.policy.action, .rule and .revision.
const EventPolicyDecision = "toolgate.policy.decision"

// recordDecision adds d as an event to ctx's span when it records.
func recordDecision(ctx context.Context, d policy.Decision) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent(EventPolicyDecision, trace.WithAttributes(
		attribute.String("toolgate.policy.action", string(d.Action)),
		attribute.String("toolgate.policy.rule", d.Rule),
		attribute.String("toolgate.policy.revision", d.Revision)))
}
