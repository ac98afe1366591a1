package telemetry

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/version"
)

// TestBuildInfo: /metrics carries toolgate_build_info with the running
// build's labels, and /healthz names the build.
func TestBuildInfo(t *testing.T) {
	tel, err := Setup(context.Background(), Options{Service: ServiceWorker, Prometheus: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	srv := httptest.NewServer(Endpoints(tel.Prometheus, func() error { return nil }))
	defer srv.Close()
	get := func(path string) string {
		res, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, res.StatusCode, b)
		}
		return string(b)
	}
	v := version.Get()
	metrics := get("/metrics")
	want := `toolgate_build_info{commit="` + v.Commit + `",goversion="` + v.Go + `",`
	var line string
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "toolgate_build_info{") {
			line = l
		}
	}
	if !strings.HasPrefix(line, want) || !strings.Contains(line, `version="`+v.Version+`"`) || !strings.HasSuffix(line, "} 1") {
		t.Fatalf("build info line %q, want %s...version=%q...} 1 in:\n%s", line, want, v.Version, metrics)
	}
	if h := get("/healthz"); h != "ok\n"+v.String("toolgate")+"\n" {
		t.Fatalf("/healthz = %q", h)
	}
	if err := Probe(srv.URL + "/healthz"); err != nil {
		t.Fatalf("Probe /healthz: %v", err)
	}
	if err := Probe(srv.URL + "/nothing"); err == nil {
		t.Fatal("Probe of a 404 succeeded")
	}
}
