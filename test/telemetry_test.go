package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/toolctl"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools"
)

// publishTraced publishes a call in binary mode with the trace context of
// ctx in its ce-traceparent header, spelled as some NATS clients do.
func publishTraced(t *testing.T, js jetstream.JetStream, ctx context.Context, agent, tool, id, session string, args string) {
	t.Helper()
	ev, err := events.New(id, events.AgentSource(agent), events.TypeCallRequested,
		map[string]any{"arguments": rawJSON(args), "session_id": session})
	if err != nil {
		t.Fatal(err)
	}
	m, err := events.Encode(events.CallSubject(agent, tool), ev, events.Binary)
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.SpanContextFromContext(ctx)
	m.Header["Ce-Traceparent"] = []string{"00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"}
	pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(pctx, m); err != nil {
		t.Fatal(err)
	}
}

type rawJSON string

func (r rawJSON) MarshalJSON() ([]byte, error) { return []byte(r), nil }

// TestOneTraceCoversAParkedCall: the agent's trace continues through the
// worker's process and execute_tool spans, the approver's decision, and
// the resumed run on the worker, with the conventions' attributes.
func TestOneTraceCoversAParkedCall(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	reader := sdkmetric.NewManualReader()
	tel := telemetry.New(tp, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), nil)

	ws := newWorkspace(t)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, askWrites)
	w := startProcess(t, ws, func(o *daemon.Options) { o.PolicyFile = pol; o.Telemetry = tel })
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	writeFile(t, tokens, "alice "+aliceToken+"\n")
	ready := make(chan string, 1)
	actx, acancel := context.WithCancel(context.Background())
	adone := make(chan error, 1)
	go func() {
		adone <- approver.Serve(actx, approver.Options{NATSURL: w.url, Listen: "127.0.0.1:0", TokenFile: tokens,
			DataDir: filepath.Join(dir, "data"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Out: io.Discard,
			Ready: func(addr string) { ready <- addr }, Telemetry: tel})
	}()
	t.Cleanup(func() { acancel(); testenv.Recv(t, adone, "adone") })
	var stack approvalStack
	select {
	case addr := <-ready:
		stack = approvalStack{worker: w, url: "http://" + addr}
	case err := <-adone:
		t.Fatalf("approver: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("approver did not start")
	}

	nc, _, err := identity.Dial(w.url, "", identity.RoleAgent, "agent-7")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	results, _ := nc.SubscribeSync(events.ResultSubject("agent-7", "traced-1"))

	// The agent's own span: everything after must be in its trace.
	agentCtx, agentSpan := tp.Tracer("agent").Start(context.Background(), "agent turn")
	publishTraced(t, js, agentCtx, "agent-7", "write", "traced-1", "s-42", `{"content":"hi\n","path":"traced.txt"}`)
	agentSpan.End()
	if r := nextResult(t, results); r.Status != events.StatusPending {
		t.Fatalf("first result %+v, want pending", r)
	}
	var res struct{ Status string }
	if code := stack.api(t, "POST", "/api/approvals/traced-1/approve", `{"comment":"fine"}`, &res); code != 200 {
		t.Fatalf("approve: %d", code)
	}
	if r := nextResult(t, results); r.Status != events.StatusOK {
		t.Fatalf("final result %+v, want ok", r)
	}

	trace := agentSpan.SpanContext().TraceID()
	want := map[string]int{"process toolgate.call.{agent}.{tool}": 1, "execute_tool write": 2, "decide {call_id}": 1,
		"process toolgate.approval.decision.{call_id}": 1}
	var spans tracetest.SpanStubs
	deadline := time.Now().Add(30 * time.Second)
	for {
		spans = nil
		got := map[string]int{}
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID() == trace {
				spans = append(spans, s)
				got[s.Name]++
			}
		}
		complete := true
		for name, n := range want {
			if got[name] < n {
				complete = false
			}
		}
		if complete {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spans of trace %s: %v, want %v (all spans: %d)", trace, got, want, len(exp.GetSpans()))
		}
		time.Sleep(50 * time.Millisecond)
	}

	byName := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
	}
	process := byName["process toolgate.call.{agent}.{tool}"][0]
	if process.SpanKind != trace2Consumer || process.Parent.SpanID() != agentSpan.SpanContext().SpanID() {
		t.Errorf("process span: kind %v parent %v, want consumer under the agent's span", process.SpanKind, process.Parent.SpanID())
	}
	checkAttrs(t, process.Name, process.Attributes, map[string]string{
		"messaging.system": "nats", "messaging.operation.type": "process", "messaging.destination.name": "toolgate.call.agent-7.write",
		"messaging.message.id": "traced-1", "messaging.consumer.group.name": "workers",
	})
	var parked, resumed tracetest.SpanStub
	for _, s := range byName["execute_tool write"] {
		if attr(s.Attributes, "toolgate.approval.resumed") == "true" {
			resumed = s
		} else {
			parked = s
		}
	}
	for _, s := range []tracetest.SpanStub{parked, resumed} {
		checkAttrs(t, s.Name, s.Attributes, map[string]string{
			"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "write", "gen_ai.tool.call.id": "traced-1",
			"gen_ai.tool.type": "function", "gen_ai.conversation.id": "s-42",
		})
		if attr(s.Attributes, "gen_ai.tool.call.arguments") != "" {
			t.Errorf("%s records the arguments without opting in", s.Name)
		}
	}
	if parked.Parent.SpanID() != process.SpanContext.SpanID() || attr(parked.Attributes, "toolgate.status") != "pending" {
		t.Errorf("parked run: parent %v status %q", parked.Parent.SpanID(), attr(parked.Attributes, "toolgate.status"))
	}
	ev := decisionEvent(t, parked)
	if attr(ev.Attributes, "toolgate.policy.action") != "ask" || attr(ev.Attributes, "toolgate.policy.rule") == "" ||
		attr(ev.Attributes, "toolgate.policy.revision") == "" {
		t.Errorf("parked run's decision event: %v", ev.Attributes)
	}
	decide := byName["decide {call_id}"][0]
	if decide.Parent.SpanID() != parked.SpanContext.SpanID() {
		t.Errorf("the decision's parent is %v, want the span that parked the call %v", decide.Parent.SpanID(), parked.SpanContext.SpanID())
	}
	checkAttrs(t, decide.Name, decide.Attributes, map[string]string{
		"toolgate.approval.approver": "alice", "toolgate.approval.outcome": "approve", "gen_ai.tool.call.id": "traced-1",
	})
	resume := byName["process toolgate.approval.decision.{call_id}"][0]
	if resume.Parent.SpanID() != parked.SpanContext.SpanID() || resumed.Parent.SpanID() != resume.SpanContext.SpanID() {
		t.Errorf("resume under %v (want %v), resumed run under %v (want %v)", resume.Parent.SpanID(), parked.SpanContext.SpanID(),
			resumed.Parent.SpanID(), resume.SpanContext.SpanID())
	}
	if attr(resumed.Attributes, "toolgate.status") != "ok" || attr(resumed.Attributes, "error.type") != "" {
		t.Errorf("resumed run: %v", resumed.Attributes)
	}
	if ev := decisionEvent(t, resumed); attr(ev.Attributes, "toolgate.policy.action") != "ask" {
		t.Errorf("resumed run's decision event: %v", ev.Attributes)
	}

	// The parked call counts once, when final; the approver counts the
	// decision and how long the call waited for it.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					got[m.Name+"{"+dp.Attributes.Encoded(attribute.DefaultEncoder())+"}"] = fmt.Sprint(dp.Value)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					got[m.Name+"{"+dp.Attributes.Encoded(attribute.DefaultEncoder())+"}"] = fmt.Sprintf("count=%d", dp.Count)
				}
			}
		}
	}
	for k, v := range map[string]string{
		"toolgate.calls{outcome=ok,tool=write}":               "1",
		"toolgate.approver.decisions{outcome=approve}":        "1",
		"toolgate.approver.decision.latency{outcome=approve}": "count=1",
		"toolgate.call.duration{tool=write}":                  "count=2",
	} {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	for k := range got {
		if strings.Contains(k, "outcome=pending") {
			t.Errorf("a parked call is counted as an outcome: %s", k)
		}
	}
}

const trace2Consumer = trace.SpanKindConsumer

func nextResult(t *testing.T, sub *nats.Subscription) events.ResultData {
	t.Helper()
	m, err := sub.NextMsg(60 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r events.ResultData
	if _, err := events.DecodeData(m.Header, m.Data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func attr(kvs []attribute.KeyValue, key string) string {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

func checkAttrs(t *testing.T, span string, kvs []attribute.KeyValue, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := attr(kvs, k); got != v {
			t.Errorf("%s: %s = %q, want %q", span, k, got, v)
		}
	}
}

func decisionEvent(t *testing.T, s tracetest.SpanStub) sdktrace.Event {
	t.Helper()
	for _, e := range s.Events {
		if e.Name == tools.EventPolicyDecision {
			return e
		}
	}
	t.Fatalf("%s has no %s event: %v", s.Name, tools.EventPolicyDecision, s.Events)
	return sdktrace.Event{}
}

// TestToolctlAuditFiltersByAgentAndTool: `toolctl audit` prints one
// execution per allowed call, carrying the gate's decision, only of the
// agent and tool asked for.
func TestToolctlAuditFiltersByAgentAndTool(t *testing.T) {
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "hello\n")
	p := startProcess(t, ws, nil)
	for _, args := range [][]string{{"call", "read", "path=README.md"}, {"call", "ls"}, {"call", "read", "path=README.md"}} {
		if _, errOut, code := p.toolctl(t, args...); code != 0 {
			t.Fatalf("%v: %d %s", args, code, errOut)
		}
	}
	var o, e strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if code := toolctl.Run(ctx, []string{"--nats", p.url, "--agent", "other", "call", "read", "path=README.md"}, &o, &e); code != 0 {
		t.Fatalf("other agent: %d %s", code, e.String())
	}
	out, errOut, code := p.toolctl(t, "audit", "--agent", "cli", "--tool", "read", "--json")
	if code != 0 {
		t.Fatalf("audit: %d %s", code, errOut)
	}
	kinds := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var a toolctl.AuditLine
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatalf("not JSON: %s", l)
		}
		if a.Data.Agent != "cli" || a.Data.Tool != "read" {
			t.Errorf("filtered out of --agent cli --tool read: %s", l)
		}
		kinds[a.Data.Kind]++
		if a.Data.Decision == nil || a.Data.Decision.Action != "allow" || strings.Join(a.Data.DecidedBy, ",") != "policy" {
			t.Errorf("an allowed call's execution event without the gate's decision: %s", l)
		}
	}
	if kinds[events.AuditDecision] != 0 || kinds[events.AuditExecution] != 2 {
		t.Errorf("kinds %v, want 2 executions carrying their decisions:\n%s", kinds, out)
	}
	text, _, code := p.toolctl(t, "audit", "--since", "1h")
	if code != 0 || strings.Count(text, "\n") != 4 || !strings.Contains(text, "allow rule=") || !strings.Contains(text, "by=policy status=ok") {
		t.Errorf("audit text (%d):\n%s", code, text)
	}
	if _, errOut, code := p.toolctl(t, "audit", "--agent", "a.b"); code != 2 || !strings.Contains(errOut, "--agent") {
		t.Errorf("a bad --agent: %d %s", code, errOut)
	}

	// --follow prints events as they come, until interrupted.
	follow := make(lineWriter, 64)
	fctx, stop := context.WithCancel(context.Background())
	fdone := make(chan int, 1)
	go func() {
		fdone <- toolctl.Run(fctx, []string{"--nats", p.url, "audit", "--follow", "--since", "0s", "--tool", "ls"}, follow, io.Discard)
	}()
	deadline := time.After(60 * time.Second)
	for i := 0; ; i++ {
		if _, errOut, code := p.toolctl(t, "call", "ls", "--id", fmt.Sprintf("follow-%d", i)); code != 0 {
			t.Fatalf("call: %d %s", code, errOut)
		}
		select {
		case l := <-follow:
			if !strings.Contains(l, "cli/ls follow-") {
				t.Errorf("followed line: %s", l)
			}
		case <-time.After(2 * time.Second):
			continue // the follower may not have been listening yet
		case <-deadline:
			t.Fatal("audit --follow printed nothing")
		}
		break
	}
	stop()
	if code := testenv.Recv(t, fdone, "fdone"); code != 0 {
		t.Errorf("audit --follow exited %d when interrupted", code)
	}
}

// lineWriter hands each line written to it to a channel.
type lineWriter chan string

func (l lineWriter) Write(p []byte) (int, error) {
	for _, s := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		select {
		case l <- s:
		default:
		}
	}
	return len(p), nil
}

// TestApproverServesMetricsAndProbes: approver --metrics-listen serves
// /healthz, /readyz and /metrics, and counts a decision made through it.
func TestApproverServesMetricsAndProbes(t *testing.T) {
	s := startApprovalStack(t)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	writeFile(t, tokens, "alice "+aliceToken+"\n")
	out := make(lineWriter, 16)
	ready := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- approver.Serve(ctx, approver.Options{NATSURL: s.worker.url, Listen: "127.0.0.1:0", TokenFile: tokens,
			DataDir: filepath.Join(dir, "data"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Out: out,
			MetricsListen: "127.0.0.1:0", Ready: func(addr string) { ready <- addr }})
	}()
	t.Cleanup(func() { cancel(); testenv.Recv(t, done, "done") })
	var metrics, api string
	for metrics == "" || api == "" {
		select {
		case l := <-out:
			if i := strings.Index(l, "metrics, health and readiness on "); i >= 0 {
				metrics = strings.TrimSpace(l[i+len("metrics, health and readiness on "):])
			}
		case a := <-ready:
			api = "http://" + a
		case err := <-done:
			t.Fatalf("approver: %v", err)
		case <-time.After(60 * time.Second):
			t.Fatal("approver did not start")
		}
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, metrics+p); code != 200 {
			t.Fatalf("%s: %d %s", p, code, body)
		}
	}
	nc, _, err := identity.Dial(s.worker.url, "", identity.RoleAgent, "agent-m")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, _ := client.New(nc, "agent-m")
	final := s.submit(t, c, "metered-approve", "m.txt", "x")
	other := &approvalStack{worker: s.worker, url: api}
	if code := other.api(t, "POST", "/api/approvals/metered-approve/approve", `{}`, nil); code != 200 {
		t.Fatalf("approve: %d", code)
	}
	if r := testenv.Recv(t, final, "final"); r == nil || r.Status != events.StatusOK {
		t.Fatalf("final %+v", r)
	}
	_, body := get(t, metrics+"/metrics")
	if !strings.Contains(body, `toolgate_approver_decisions_total{outcome="approve"} 1`) ||
		!strings.Contains(body, `toolgate_approver_decision_latency_seconds_count{outcome="approve"} 1`) {
		t.Errorf("approver metrics:\n%s", body)
	}
}
