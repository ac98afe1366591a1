package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestHeaderCarrierFindsAnyCase: NATS headers keep the case a publisher
// wrote; the CloudEvents traceparent is found in any spelling.
func TestHeaderCarrierFindsAnyCase(t *testing.T) {
	tel := Disabled()
	for _, key := range []string{"ce-traceparent", "Ce-Traceparent", "CE-TRACEPARENT", "cE-tRaCePaReNt"} {
		h := nats.Header{key: []string{tp}}
		sc := trace.SpanContextFromContext(tel.ExtractHeader(context.Background(), h))
		if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsRemote() {
			t.Errorf("%s: extracted %v", key, sc)
		}
	}
	// Injecting replaces whatever spelling was there with one header.
	h := nats.Header{"Ce-Traceparent": []string{"00-00000000000000000000000000000001-0000000000000001-01"}}
	ctx := tel.Extract(context.Background(), tp, "")
	tel.InjectHeader(ctx, h)
	if len(h) != 1 || h.Get("ce-traceparent") != tp {
		t.Errorf("after inject: %v", h)
	}
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-0000000000000000-01"} {
		if sc := trace.SpanContextFromContext(tel.Extract(context.Background(), bad, "")); sc.IsValid() {
			t.Errorf("%q extracted as %v", bad, sc)
		}
	}
}

// TestLogLinesAboutACallCarryItsTraceIDs: a line naming a call being
// handled gets its trace and span ids, whether it was logged with the
// span's context, with call_id as an attribute, or through With; secrets
// are redacted.
func TestLogLinesAboutACallCarryItsTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger("json", &buf)
	if err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)).Tracer("test")
	ctx, span := tracer.Start(context.Background(), "execute_tool read")
	untrack := Track("call-1", span.SpanContext())
	log.InfoContext(ctx, "with context")
	log.Info("by attribute", "call_id", "call-1")
	log.With("call_id", "call-1").Warn("through With", "token", "s3cret", "Authorization", "Bearer s3cret")
	log.Info("another call", "call_id", "call-2")
	untrack()
	log.Info("after the call", "call_id", "call-1")
	span.End()

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines:\n%s", len(lines), buf.String())
	}
	want := span.SpanContext()
	for i, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %d is not JSON: %s", i, l)
		}
		traced := i < 3
		if got := m["trace_id"] == want.TraceID().String() && m["span_id"] == want.SpanID().String(); got != traced {
			t.Errorf("line %d (%s): trace ids %v %v, want them: %v", i, m["msg"], m["trace_id"], m["span_id"], traced)
		}
	}
	if strings.Contains(buf.String(), "s3cret") {
		t.Errorf("a secret reached the log:\n%s", buf.String())
	}
	if _, err := NewLogger("yaml", &buf); err == nil {
		t.Error("an unknown log format is accepted")
	}
}

// TestSetupDefaultsToNothing: with no OTEL_* variable no span is
// exported and the tracer is a no-op.
func TestSetupDefaultsToNothing(t *testing.T) {
	for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"} {
		t.Setenv(k, "")
	}
	tel, err := Setup(context.Background(), Options{Service: ServiceWorker})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	_, span := tel.Tracer.Start(context.Background(), "x")
	if tel.Exporting || span.IsRecording() || tel.Prometheus != nil {
		t.Fatalf("exporting %v, recording %v, prometheus %v", tel.Exporting, span.IsRecording(), tel.Prometheus != nil)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	tel2, err := Setup(context.Background(), Options{Service: ServiceWorker, Prometheus: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tel2.Shutdown(context.Background())
	if _, span := tel2.Tracer.Start(context.Background(), "x"); !tel2.Exporting || !span.IsRecording() || tel2.Prometheus == nil {
		t.Fatal("an OTLP endpoint alone does not turn tracing on, or Prometheus is off")
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	tel3, err := Setup(context.Background(), Options{Service: ServiceWorker})
	if err != nil {
		t.Fatal(err)
	}
	if tel3.Exporting {
		t.Fatal("OTEL_TRACES_EXPORTER=none exports")
	}
}
