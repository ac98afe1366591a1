package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"time"

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

// Probe GETs url and returns nil when it answers 200 within five seconds:
// the HEALTHCHECK of a container image, which has no curl
// (worker --healthcheck URL, approver --healthcheck URL).
func Probe(url string) error {
	c := &http.Client{Timeout: 5 * time.Second}
	res, err := c.Get(url)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, res.Status)
	}
	return nil
}
