// Package telemetry sets up toolgate's OpenTelemetry traces and metrics
// from the standard OTEL_* environment, and holds what every process shares
// to use them: the semantic-conventions version, the propagation of trace
// context through CloudEvents on NATS, the instruments, a log handler that
// stamps trace ids on lines about a call, and the /metrics, /healthz and
// /readyz endpoints.
//
// With nothing configured it exports nothing and costs a no-op tracer: a
// user who sets no OTEL_* variable sees no change.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/propagators/autoprop"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	mnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tnoop "go.opentelemetry.io/otel/trace/noop"
)

// Service names used unless OTEL_SERVICE_NAME says otherwise.
const (
	ServiceWorker   = "toolgate-worker"
	ServiceApprover = "toolgate-approver"
	ServiceToolctl  = "toolctl"
)

// CaptureContentEnv opts in to recording tool arguments and results on
// spans (gen_ai.tool.call.arguments / gen_ai.tool.call.result). They may
// hold secrets and personal data, so the default is off.
const CaptureContentEnv = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

// Options configure Setup.
type Options struct {
	// Service is the default service.name.
	Service string
	// Prometheus records metrics in-process and serves them as Prometheus
	// text from Telemetry.Prometheus (the --metrics-listen endpoint).
	Prometheus bool
}

// Telemetry is what a process traces and measures with. The zero value is
// not usable; a nil *Telemetry means Disabled().
type Telemetry struct {
	// TracerProvider makes the process's tracers.
	TracerProvider trace.TracerProvider
	// Tracer is toolgate's tracer, its schema URL the pinned conventions.
	Tracer trace.Tracer
	// Propagator reads and writes trace context (OTEL_PROPAGATORS,
	// default W3C tracecontext and baggage).
	Propagator propagation.TextMapPropagator
	// MeterProvider makes the process's meters.
	MeterProvider metric.MeterProvider
	// Meter is toolgate's meter.
	Meter metric.Meter
	// Prometheus serves the metrics as Prometheus text; nil unless
	// Options.Prometheus.
	Prometheus http.Handler
	// CaptureContent records arguments and results on spans.
	CaptureContent bool
	// Exporting reports whether spans leave the process.
	Exporting bool
	// Tracing is false when the tracer provider is a no-op: callers then
	// skip starting spans (trace context still flows through contexts).
	Tracing bool
	// Metering is false when the meter provider is a no-op: callers then
	// skip building metric attributes.
	Metering bool

	shutdown []func(context.Context) error
}

// InstrumentationName names toolgate's tracer and meter.
const InstrumentationName = "github.com/toolgate/toolgate"

// Disabled is telemetry that records nothing: no-op tracer and meter, W3C
// trace context still propagated so ids reach results and logs.
func Disabled() *Telemetry {
	return New(tnoop.NewTracerProvider(), mnoop.NewMeterProvider(), nil)
}

// New builds telemetry over given providers (tests pass the SDK's
// in-memory exporter and a manual metric reader). A nil propagator means
// W3C tracecontext and baggage.
func New(tp trace.TracerProvider, mp metric.MeterProvider, prop propagation.TextMapPropagator) *Telemetry {
	if prop == nil {
		prop = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	return &Telemetry{
		TracerProvider: tp, Tracer: tp.Tracer(InstrumentationName, trace.WithSchemaURL(SchemaURL)),
		Propagator: prop, MeterProvider: mp, Meter: mp.Meter(InstrumentationName, metric.WithSchemaURL(SchemaURL)),
		CaptureContent: envTrue(CaptureContentEnv),
		Tracing:        !isNoopTracer(tp),
		Metering:       !isNoopMeter(mp),
	}
}

func isNoopTracer(tp trace.TracerProvider) bool {
	switch tp.(type) {
	case tnoop.TracerProvider, *tnoop.TracerProvider:
		return true
	}
	return false
}

func isNoopMeter(mp metric.MeterProvider) bool {
	switch mp.(type) {
	case mnoop.MeterProvider, *mnoop.MeterProvider:
		return true
	}
	return false
}

// Setup configures traces and metrics from the OTEL_* environment:
//
//   - traces are exported when OTEL_TRACES_EXPORTER names an exporter
//     (otlp, console) or, when it is unset, when an OTLP endpoint is set
//     (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
//     otherwise none, and the tracer is a no-op;
//   - metrics are pushed when OTEL_METRICS_EXPORTER names an exporter, and
//     kept for /metrics when o.Prometheus is set; otherwise a no-op meter;
//   - OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES describe the process
//     (service.name defaults to o.Service), OTEL_PROPAGATORS the
//     propagation, OTEL_EXPORTER_OTLP_* the endpoint and protocol.
//
// OTEL_SDK_DISABLED=true turns everything off.
func Setup(ctx context.Context, o Options) (*Telemetry, error) {
	prop := autoprop.NewTextMapPropagator()
	disabled := envTrue("OTEL_SDK_DISABLED")
	// No schema URL of our own on the resource: the SDK's detectors use
	// their own version, and resources of different schemas do not merge.
	res, err := resource.New(ctx, resource.WithAttributes(ServiceName(o.Service)), resource.WithFromEnv(),
		resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry resource (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME): %w", err)
	}
	var (
		tp       trace.TracerProvider = tnoop.NewTracerProvider()
		mp       metric.MeterProvider = mnoop.NewMeterProvider()
		closers  []func(context.Context) error
		promH    http.Handler
		exporing bool
	)
	if !disabled && tracesWanted() {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("trace exporter (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_*): %w", err)
		}
		if !autoexport.IsNoneSpanExporter(exp) {
			stp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
			tp, exporing = stp, true
			closers = append(closers, stp.Shutdown)
		}
	}
	var readers []sdkmetric.Option
	if o.Prometheus {
		reg := prometheus.NewRegistry()
		pe, err := promexporter.New(promexporter.WithRegisterer(reg), promexporter.WithoutScopeInfo())
		if err != nil {
			return nil, fmt.Errorf("prometheus exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(pe))
		promH = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	}
	if !disabled && metricsWanted() {
		r, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return nil, fmt.Errorf("metric exporter (OTEL_METRICS_EXPORTER, OTEL_EXPORTER_OTLP_*): %w", err)
		}
		if !autoexport.IsNoneMetricReader(r) {
			readers = append(readers, sdkmetric.WithReader(r))
		}
	}
	if len(readers) > 0 {
		smp := sdkmetric.NewMeterProvider(append(readers, sdkmetric.WithResource(res))...)
		mp = smp
		closers = append(closers, smp.Shutdown)
	}
	t := New(tp, mp, prop)
	t.Prometheus, t.Exporting, t.shutdown = promH, exporing, closers
	if err := registerBuildInfo(t); err != nil {
		return nil, fmt.Errorf("build info metric: %w", err)
	}
	return t, nil
}

// Shutdown flushes and stops the exporters.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}

// OrDisabled returns t, or Disabled() when t is nil.
func (t *Telemetry) OrDisabled() *Telemetry {
	if t == nil {
		return Disabled()
	}
	return t
}

// tracesWanted: an exporter named, or an OTLP endpoint given without one.
func tracesWanted() bool {
	if v := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); v != "" {
		return v != "none"
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// metricsWanted: only when named; /metrics needs no push.
func metricsWanted() bool {
	v := strings.TrimSpace(os.Getenv("OTEL_METRICS_EXPORTER"))
	return v != "" && v != "none"
}

func envTrue(name string) bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(name))) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}
