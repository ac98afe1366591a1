package toolctl

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// traceCall starts the span of a `toolctl call` (service toolctl unless
// OTEL_SERVICE_NAME says otherwise), continuing the trace of a TRACEPARENT
// variable when a script sets one, and returns the call option that sends
// its trace context to the worker. end records the result and flushes.
func traceCall(ctx context.Context, env *Env, tool string) (client.CallOption, func(*events.ResultData, error)) {
	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: telemetry.ServiceToolctl})
	if err != nil {
		fmt.Fprintf(env.Stderr, "toolctl: tracing off: %v\n", err)
		tel = telemetry.Disabled()
	}
	ctx = tel.Extract(ctx, os.Getenv("TRACEPARENT"), os.Getenv("TRACESTATE"))
	ctx, span := tel.Tracer.Start(ctx, "send toolgate.call.{agent}.{tool}", trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(
			telemetry.KeyMsgSystem.String(telemetry.MessagingSystem),
			telemetry.KeyMsgOperationName.String("send"), telemetry.MsgOperationSend,
			telemetry.KeyMsgDestination.String(events.CallSubject(env.Agent, tool)),
			telemetry.KeyMsgTemplate.String("toolgate.call.{agent}.{tool}"),
			telemetry.KeyToolName.String(tool), telemetry.KeyAgent.String(env.Agent))
	}
	tp, ts := tel.Inject(ctx)
	return client.WithTraceContext(tp, ts), func(res *events.ResultData, err error) {
		switch {
		case err != nil:
			span.SetStatus(codes.Error, err.Error())
		case res != nil:
			if span.IsRecording() {
				span.SetAttributes(telemetry.KeyToolCallID.String(res.CallID), telemetry.KeyStatus.String(string(res.Status)))
			}
			if res.IsError {
				span.SetStatus(codes.Error, string(res.Status))
			}
		}
		span.End()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
	}
}
