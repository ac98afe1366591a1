package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/toolctl"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes the protobuf
// export requests a real exporter sends and keeps the spans by service.
type otlpReceiver struct {
	mu    sync.Mutex
	spans map[string][]*tracepb.Span // service.name → spans
	got   chan struct{}
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost {
		http.NotFound(w, req)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var ex collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &ex); err != nil {
		http.Error(w, "not an OTLP export request: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range ex.ResourceSpans {
		svc := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				svc = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			r.spans[svc] = append(r.spans[svc], ss.Spans...)
		}
	}
	r.mu.Unlock()
	select {
	case r.got <- struct{}{}:
	default:
	}
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// executed returns the call ids of the execute_tool spans of service.
func (r *otlpReceiver) executed(service string) map[string]*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]*tracepb.Span{}
	for _, s := range r.spans[service] {
		if !strings.HasPrefix(s.Name, "execute_tool") {
			continue
		}
		for _, a := range s.Attributes {
			if a.Key == "gen_ai.tool.call.id" {
				out[a.GetValue().GetStringValue()] = s
			}
		}
	}
	return out
}

// TestWorkerBinaryExportsSpansAndServesMetrics runs the worker binary as a
// user would, configured by the OTEL_* environment only: its spans reach
// an OTLP/HTTP receiver, and /metrics counts exactly the calls made, by
// tool and outcome.
func TestWorkerBinaryExportsSpansAndServesMetrics(t *testing.T) {
	recv := &otlpReceiver{spans: map[string][]*tracepb.Span{}, got: make(chan struct{}, 1)}
	collector := httptest.NewServer(recv)
	defer collector.Close()

	bin := filepath.Join(t.TempDir(), "worker")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/worker").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "hello\n")
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", ws, "--sandbox", "off",
		"--metrics-listen", "127.0.0.1:0", "--log-format", "json")
	cmd.Env = append(os.Environ(),
		"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL, "OTEL_BSP_SCHEDULE_DELAY=100",
		"OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=test", "OTEL_SERVICE_NAME=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var (
		urlRE     = regexp.MustCompile(`listening on (nats://127\.0\.0\.1:\d+)`)
		metricsRE = regexp.MustCompile(`metrics, health and readiness on (http://127\.0\.0\.1:\d+)`)
		url, mURL string
		ready     bool
		lines     = make(chan string, 100)
	)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(60 * time.Second)
	for url == "" || mURL == "" || !ready {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("worker exited before it was ready")
			}
			if m := urlRE.FindStringSubmatch(l); m != nil {
				url = m[1]
			}
			if m := metricsRE.FindStringSubmatch(l); m != nil {
				mURL = m[1]
			}
			ready = ready || strings.Contains(l, "worker taking calls")
		case <-deadline:
			t.Fatal("worker never became ready")
		}
	}
	var (
		logMu sync.Mutex
		logs  []string
	)
	go func() {
		for l := range lines {
			logMu.Lock()
			logs = append(logs, l)
			logMu.Unlock()
		}
	}()
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, mURL+p); code != 200 {
			t.Fatalf("%s: %d %s", p, code, body)
		}
	}

	nc, _, err := identity.Dial(url, "", identity.RoleAgent, "metered")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, _ := client.New(nc, "metered")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	calls := []struct {
		id, tool string
		args     map[string]any
		want     events.Status
	}{
		{"m-1", "read", map[string]any{"path": "README.md"}, events.StatusOK},
		{"m-2", "read_file", map[string]any{"path": "README.md"}, events.StatusOK},
		{"m-3", "read", map[string]any{"path": "missing.md"}, events.StatusError},
		{"m-4", "ls", map[string]any{}, events.StatusOK},
		{"m-5", "bash", map[string]any{"command": "sudo id"}, events.StatusDenied},
		{"m-6", "no-such-tool-" + strconv.Itoa(os.Getpid()), map[string]any{}, events.StatusError},
		{"m-7", "read", map[string]any{"nope": 1}, events.StatusError},
	}
	want := map[string]int{}
	for _, k := range calls {
		res, err := c.Call(ctx, k.tool, k.args, client.WithID(k.id))
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != k.want {
			t.Fatalf("%s: status %s, want %s (%s)", k.id, res.Status, k.want, res.Output)
		}
		tool := map[string]string{"read_file": "read"}[k.tool]
		if tool == "" {
			tool = k.tool
		}
		if strings.HasPrefix(tool, "no-such-tool") {
			tool = "_unknown"
		}
		want[fmt.Sprintf(`toolgate_calls_total{outcome="%s",tool="%s"}`, k.want, tool)]++
	}

	// /metrics counts exactly the calls made, by tool and outcome.
	_, body := get(t, mURL+"/metrics")
	got := map[string]int{}
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "toolgate_calls_total{") {
			f := strings.Fields(l)
			n, _ := strconv.Atoi(f[len(f)-1])
			got[f[0]] = n
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("toolgate_calls_total:\n got %v\nwant %v", got, want)
	}
	if !strings.Contains(body, `toolgate_call_duration_seconds_count{tool="read"} 4`) {
		t.Errorf("no duration histogram with 4 reads in:\n%s", body)
	}

	// Every call's execute_tool span reached the receiver, from service
	// toolgate-worker.
	for end := time.Now().Add(30 * time.Second); ; {
		ex := recv.executed("toolgate-worker")
		if len(ex) == len(calls) {
			if s := ex["m-5"]; s.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
				t.Errorf("denied call's span status %v", s.Status)
			}
			if s := ex["m-1"]; s.Name != "execute_tool read" {
				t.Errorf("span name %q", s.Name)
			}
			break
		}
		if time.Now().After(end) {
			t.Fatalf("execute_tool spans received: %d of %d (services: %v)", len(ex), len(calls), recv.services())
		}
		select {
		case <-recv.got:
		case <-time.After(time.Second):
		}
	}

	// toolctl, configured the same way, starts the trace the worker continues.
	for k, v := range map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL, "OTEL_SERVICE_NAME": ""} {
		t.Setenv(k, v)
	}
	var o, e strings.Builder
	if code := toolctl.Run(ctx, []string{"--nats", url, "--agent", "metered", "call", "read", "--id", "m-ctl", "path=README.md"}, &o, &e); code != 0 {
		t.Fatalf("toolctl call: %d %s", code, e.String())
	}
	for end := time.Now().Add(30 * time.Second); ; {
		sent := recv.named("toolctl", "send toolgate.call.{agent}.{tool}")
		ex := recv.executed("toolgate-worker")["m-ctl"]
		if len(sent) == 1 && ex != nil {
			if string(sent[0].TraceId) != string(ex.TraceId) {
				t.Fatalf("toolctl's trace %x, the worker's %x", sent[0].TraceId, ex.TraceId)
			}
			break
		}
		if time.Now().After(end) {
			t.Fatalf("toolctl spans %d, worker span %v (services %v)", len(sent), ex != nil, recv.services())
		}
		select {
		case <-recv.got:
		case <-time.After(time.Second):
		}
	}

	// JSON logs: the line about a rejected call carries its call_id and
	// the trace of its ce-traceparent; arguments never reach the log.
	const secret = "sekret-3141592653"
	if res, err := c.Call(ctx, "read", map[string]any{"path": secret + ".md"}, client.WithID("m-secret")); err != nil || res.Status != events.StatusError {
		t.Fatalf("m-secret: %+v %v", res, err)
	}
	js, _ := jetstream.New(nc)
	bad := nats.NewMsg(events.CallSubject("metered", "read"))
	bad.Header.Set("ce-specversion", "1.0")
	bad.Header.Set("ce-id", "m-bad")
	bad.Header.Set("ce-source", events.AgentSource("metered"))
	bad.Header.Set("ce-type", events.TypeCallRequested)
	bad.Header.Set("Ce-Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	bad.Header.Set(nats.MsgIdHdr, "m-bad")
	bad.Data = []byte(`{"arguments":{"path":"` + secret + `"},"bogus":1}`)
	badRes, _ := nc.SubscribeSync(events.ResultSubject("metered", "m-bad"))
	if _, err := js.PublishMsg(ctx, bad); err != nil {
		t.Fatal(err)
	}
	if _, err := badRes.NextMsg(30 * time.Second); err != nil {
		t.Fatalf("no result for the rejected call: %v", err)
	}
	for end := time.Now().Add(30 * time.Second); ; {
		logMu.Lock()
		found := ""
		for _, l := range logs {
			if strings.Contains(l, `"rejected call"`) && strings.Contains(l, `"call_id":"m-bad"`) {
				found = l
			}
		}
		all := strings.Join(logs, "\n")
		logMu.Unlock()
		if found != "" {
			var m map[string]any
			if err := json.Unmarshal([]byte(found), &m); err != nil || m["trace_id"] != "0af7651916cd43dd8448eb211c80319c" || len(fmt.Sprint(m["span_id"])) != 16 {
				t.Errorf("rejected call's log line: %s", found)
			}
			if strings.Contains(all, secret) {
				t.Errorf("arguments reached the log:\n%s", all)
			}
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no log line about the rejected call:\n%s", all)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Draining: SIGTERM and the worker exits 0 after flushing its spans.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("worker exited with %v after SIGTERM", err)
	}
}

// named returns service's spans called name.
func (r *otlpReceiver) named(service, name string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans[service] {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func (r *otlpReceiver) services() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for s := range r.spans {
		out = append(out, s)
	}
	return out
}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
