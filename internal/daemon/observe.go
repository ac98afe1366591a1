package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/parking"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/worker"
)

// startTelemetry sets up traces and metrics from the OTEL_* environment
// (service toolgate-worker unless OTEL_SERVICE_NAME says otherwise); the
// returned function flushes and stops them.
func startTelemetry(ctx context.Context, o Options) (*telemetry.Telemetry, func(), error) {
	if o.Telemetry != nil {
		return o.Telemetry, func() {}, nil
	}
	t, err := telemetry.Setup(ctx, telemetry.Options{Service: telemetry.ServiceWorker, Prometheus: o.MetricsListen != ""})
	if err != nil {
		return nil, nil, err
	}
	if t.Exporting {
		fmt.Fprintln(o.Out, "toolgate: exporting traces (OTEL_* environment)")
	}
	return t, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := t.Shutdown(sctx); err != nil {
			o.Logger.Warn("telemetry: flush on stop", "err", err)
		}
	}, nil
}

// serveMetrics registers the gauges read from the bus (calls waiting in
// the stream, parked approvals) and, with --metrics-listen, serves
// /metrics, /healthz and /readyz until ctx ends.
func serveMetrics(ctx context.Context, o Options, t *telemetry.Telemetry, js jetstream.JetStream, w *worker.Worker, mgr *parking.Manager) error {
	waiting := cached(func(ctx context.Context) (int64, error) {
		c, err := js.Consumer(ctx, bus.StreamCalls, bus.ConsumerWorkers)
		if err != nil {
			return 0, err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return 0, err
		}
		return int64(info.NumPending), nil
	})
	parked := cached(func(ctx context.Context) (int64, error) {
		ps, err := mgr.Pending(ctx)
		return int64(len(ps)), err
	})
	if err := t.Gauge("toolgate.calls.waiting", "{call}", "Calls in the stream no worker has taken yet.", waiting); err != nil {
		return err
	}
	if err := t.Gauge("toolgate.approvals.parked", "{call}", "Parked calls waiting for people's decision.", parked); err != nil {
		return err
	}
	if err := t.Gauge("toolgate.audit.pending", "{call}", "Calls that ran and whose audit events are not stored yet: they hold their slot and stay unacked until they are (at most the worker's concurrency).",
		func(context.Context) (int64, bool) { n, _ := w.AuditBacklog(); return int64(n), true }); err != nil {
		return err
	}
	if o.MetricsListen == "" {
		return nil
	}
	addr, err := telemetry.Serve(ctx, o.MetricsListen, telemetry.Endpoints(t.Prometheus, w.Ready))
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "toolgate: metrics, health and readiness on http://%s (/metrics /healthz /readyz)\n", addr)
	return nil
}

// cached reads fn at most every 10 seconds: a gauge collected often does
// not load the bus.
func cached(fn func(ctx context.Context) (int64, error)) func(ctx context.Context) (int64, bool) {
	var (
		mu   sync.Mutex
		at   time.Time
		last int64
		ok   bool
	)
	return func(ctx context.Context) (int64, bool) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(at) < 10*time.Second {
			return last, ok
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		v, err := fn(ctx)
		at, last, ok = time.Now(), v, err == nil
		return last, ok
	}
}
