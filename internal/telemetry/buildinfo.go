package telemetry

import (
	"context"
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/toolgate/toolgate/internal/version"
)

// Build-information labels of toolgate_build_info.
const (
	LabelVersion   = attribute.Key("version")
	LabelCommit    = attribute.Key("commit")
	LabelGoVersion = attribute.Key("goversion")
)

// registerBuildInfo adds toolgate_build_info: always 1, its labels the
// running build (version, commit, Go), so a dashboard can tell which
// build each process runs and a rollout can be followed by counting
// series per version.
func registerBuildInfo(t *Telemetry) error {
	v := version.Get()
	attrs := metric.WithAttributes(LabelVersion.String(v.Version), LabelCommit.String(v.Commit), LabelGoVersion.String(v.Go))
	_, err := t.Meter.Int64ObservableGauge("toolgate.build_info",
		metric.WithDescription("The running build: version, commit and Go version as labels; the value is always 1."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(1, attrs)
			return nil
		}))
	return err
}

// Healthz answers the liveness probe: "ok" and the build on a second
// line, so a person checking a pod sees what it runs.
func Healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "ok\n%s\n", version.Get().String("toolgate"))
}
