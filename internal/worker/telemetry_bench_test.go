package worker

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools"
)

// discard is a span exporter that drops what it gets: the cost measured is
// toolgate's instrumentation and the SDK's, not a network's.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkCallTelemetry measures what the per-call instrumentation adds to
// running a call through the pipeline (echo: the cheapest tool), with a
// real message fetched from a real server: off (nothing configured), off
// with a traceparent on the call, and on (spans through the SDK's batch
// processor, metrics kept for Prometheus).
func BenchmarkCallTelemetry(b *testing.B) {
	s := testenv.StartNATS(b, "")
	nc, js := s.Connect(b)
	ctx := context.Background()
	if err := bus.Provision(ctx, js, bus.Config{}); err != nil {
		b.Fatal(err)
	}
	ev, _ := events.New("bench-1", events.AgentSource("bench"), events.TypeCallRequested,
		events.CallData{Arguments: json.RawMessage(`{"text":"hello"}`), SessionID: "s-1"})
	m, _ := events.Encode(events.CallSubject("bench", "echo"), ev, events.Binary)
	m.Header.Set("ce-traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		b.Fatal(err)
	}
	cons, err := js.Consumer(ctx, bus.StreamCalls, bus.ConsumerWorkers)
	if err != nil {
		b.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	msg := <-batch.Messages()
	if msg == nil {
		b.Fatal("no message")
	}
	var ctr counter
	reg := testRegistry(b, &ctr, nil)

	on := func() *telemetry.Telemetry {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		t, _ := telemetry.Setup(ctx, telemetry.Options{Prometheus: true}) // for its Prometheus meter
		return telemetry.New(tp, t.MeterProvider, nil)
	}
	for _, bc := range []struct {
		name        string
		tel         func() *telemetry.Telemetry
		traceparent bool
		instrument  bool
	}{
		{"bare", func() *telemetry.Telemetry { return nil }, false, false},
		{"off", func() *telemetry.Telemetry { return nil }, false, true},
		{"off_traceparent", func() *telemetry.Telemetry { return nil }, true, true},
		{"on", on, true, true},
		{"on_metrics_only", func() *telemetry.Telemetry {
			return telemetry.New(telemetry.Disabled().TracerProvider, sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())), nil)
		}, true, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			w, err := New(nc, tools.NewPipeline(reg), Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Telemetry: bc.tel()})
			if err != nil {
				b.Fatal(err)
			}
			in, err := events.DecodeCall(msg.Subject(), msg.Headers(), msg.Data(), 0)
			if err != nil {
				b.Fatal(err)
			}
			if !bc.traceparent {
				in.TraceParent = ""
			}
			b.ReportAllocs()
			for b.Loop() {
				c := &tools.Call{ID: in.ID, Agent: in.Agent, SessionID: in.Data.SessionID, Name: in.Tool, Arguments: in.Data.Arguments}
				if !bc.instrument {
					out, err := w.handler.Handle(w.execCtx, c)
					_ = outcome(c, out, err, false)
					continue
				}
				ctx, done := w.delivery(jsMsg{msg}, in)
				xctx, x := w.startExecute(ctx, in, c, false)
				out, err := w.handler.Handle(xctx, c)
				res := outcome(c, out, err, false)
				w.recordExecute(xctx, x, c, &res, err)
				w.countOutcome(ctx, &res)
				done()
			}
		})
	}
}
