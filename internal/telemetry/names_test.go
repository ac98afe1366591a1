package telemetry

import (
	"context"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDashboardAndDocsNameTheExportedMetrics: every metric the Grafana
// dashboard queries is one the instruments export under that Prometheus
// name, and every exported metric is documented.
func TestDashboardAndDocsNameTheExportedMetrics(t *testing.T) {
	tel, err := Setup(context.Background(), Options{Service: ServiceWorker, Prometheus: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	w, err := NewWorkerMetrics(tel)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewApproverMetrics(tel)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w.Calls.Add(ctx, 1)
	w.Duration.Record(ctx, 0.1)
	w.Redeliveries.Add(ctx, 1)
	w.DeadLetters.Add(ctx, 1)
	w.PolicyReloads.Add(ctx, 1)
	w.SandboxFailures.Add(ctx, 1)
	w.AuditFailures.Add(ctx, 1)
	w.AuditLost.Add(ctx, 1)
	w.AgentRefused.Add(ctx, 1)
	a.Decisions.Add(ctx, 1)
	a.Latency.Record(ctx, 3)
	for _, g := range []string{"toolgate.calls.waiting", "toolgate.calls.scheduled", "toolgate.approvals.parked", "toolgate.audit.pending"} {
		if err := tel.Gauge(g, "{call}", g, func(context.Context) (int64, bool) { return 1, true }); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	tel.Prometheus.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	exported := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (toolgate_\w+) `).FindAllStringSubmatch(rec.Body.String(), -1) {
		exported[m[1]] = true
	}
	if len(exported) != 16 {
		t.Fatalf("%d toolgate metrics exported, want 16 (toolgate_build_info among them):\n%s", len(exported), rec.Body.String())
	}
	dash, err := os.ReadFile("../../deploy/grafana/toolgate.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range regexp.MustCompile(`toolgate_\w+`).FindAllString(string(dash), -1) {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
		if !exported[base] {
			t.Errorf("the dashboard queries %s, which is not exported", name)
		}
	}
	doc, err := os.ReadFile("../../docs/OBSERVABILITY.md")
	if err != nil {
		t.Fatal(err)
	}
	for name := range exported {
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("%s is not documented in docs/OBSERVABILITY.md", name)
		}
	}
}
