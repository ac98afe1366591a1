package worker

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	tnoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/testenv"
	papproval "github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// auditOf reads the audit events stored for agent: execution events by
// call id, and decision events by call id.
func auditOf(t *testing.T, js jetstream.JetStream, agent string, want int) (exec, decided map[string]events.AuditData) {
	t.Helper()
	exec, decided = map[string]events.AuditData{}, map[string]events.AuditData{}
	cons, err := js.OrderedConsumer(ctxT(t), bus.StreamAudit, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.AuditSubject(agent, ">")}})
	if err != nil {
		t.Fatal(err)
	}
	for len(exec)+len(decided) < want {
		m, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
		if err != nil {
			t.Fatalf("audit events: %d of %d: %v", len(exec)+len(decided), want, err)
		}
		var a events.AuditData
		ev, err := events.DecodeData(m.Headers(), m.Data(), &a)
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Type() {
		case events.TypeCallAudited:
			exec[a.CallID] = a
		case events.TypeDecisionAudited:
			decided[a.CallID] = a
		default:
			t.Fatalf("audit stream holds a %s event", ev.Type())
		}
	}
	return exec, decided
}

// TestAuditHashesRecomputeFromResults: a pipeline recomputes the audit's
// hashes from what it can see - the canonical JSON of the arguments the
// agent sent and the output of the published result - and they match.
func TestAuditHashesRecomputeFromResults(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Name: "auditor", Bus: fastBus})
	c, nc := newClient(t, s, "audited")
	js, _ := jetstream.New(nc)
	args := map[string]json.RawMessage{
		"a-1": json.RawMessage(`{"text":"héllo \"quoted\" <tag>"}`),
		"a-2": json.RawMessage(`{"z":[3,2,1],"b":{"y":1.50,"x":"é"},"a":null}`),
		"a-3": json.RawMessage(`{"text":7}`),
	}
	tools := map[string]string{"a-1": "echo", "a-2": "fail", "a-3": "echo"}
	results := map[string]events.ResultData{}
	for id, a := range args {
		res, err := c.Call(ctxT(t), tools[id], a, client.WithID(id))
		if err != nil {
			t.Fatal(err)
		}
		results[id] = *res
	}
	// a-3's arguments are invalid: it never reaches the gate, so its
	// execution event carries no decision. a-1 and a-2 were allowed: the
	// gate's decision is folded into their execution events.
	exec, decided := auditOf(t, js, "audited", 3)
	if len(decided) != 0 {
		t.Errorf("decision events beside the execution events: %+v", decided)
	}
	for id, a := range args {
		e := exec[id]
		canon, err := papproval.Canonical(a)
		if err != nil {
			t.Fatal(err)
		}
		if e.ArgsSHA256 != SHA256Hex(canon) {
			t.Errorf("%s: args_sha256 %s, recomputed %s from %s", id, e.ArgsSHA256, SHA256Hex(canon), canon)
		}
		if e.ResultSHA256 != SHA256Hex([]byte(results[id].Output)) {
			t.Errorf("%s: result_sha256 %s does not match the result's output %q", id, e.ResultSHA256, results[id].Output)
		}
		if e.Kind != events.AuditExecution || e.Status != results[id].Status || e.Worker != "auditor" || e.Agent != "audited" ||
			e.Tool != tools[id] || e.Time.IsZero() {
			t.Errorf("%s: execution audit %+v", id, e)
		}
		if id == "a-3" {
			if e.Decision != nil || len(e.DecidedBy) != 0 || !e.DecidedAt.IsZero() {
				t.Errorf("a-3 never reached the gate, yet its execution audit carries a decision: %+v", e)
			}
			continue
		}
		if e.Decision == nil || e.Decision.Action != "allow" || len(e.DecidedBy) != 1 || e.DecidedBy[0] != "policy" ||
			e.DecidedAt.IsZero() || e.DecidedAt.After(e.Time) {
			t.Errorf("%s: the gate's decision is not in the execution audit: %+v", id, e)
		}
	}
	if results["a-3"].Status != events.StatusError {
		t.Errorf("a-3 (invalid arguments) is %s", results["a-3"].Status)
	}
}

// TestAuditPublishIsRetriedNotDropped: while the audit stream is gone the
// publish fails; the failure is counted and retried until the stream is
// back, and the event is stored.
func TestAuditPublishIsRetriedNotDropped(t *testing.T) {
	s := testenv.StartNATS(t, "")
	reader := sdkmetric.NewManualReader()
	tel := telemetry.New(tnoop.NewTracerProvider(), sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), nil)
	var ctr counter
	startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: fastBus, Telemetry: tel})
	c, nc := newClient(t, s, "retried")
	js, _ := jetstream.New(nc)
	if err := js.DeleteStream(ctxT(t), bus.StreamAudit); err != nil {
		t.Fatal(err)
	}
	res, err := c.Call(ctxT(t), "echo", map[string]any{"text": "kept"}, client.WithID("r-1"))
	if err != nil || res.Status != events.StatusOK {
		t.Fatalf("%+v %v", res, err)
	}
	for end := time.Now().Add(30 * time.Second); counterValue(t, reader, "toolgate.audit.publish_failures") == 0; {
		if time.Now().After(end) {
			t.Fatal("no audit publish failure counted while the audit stream is gone")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := bus.Provision(ctxT(t), js, fastBus); err != nil {
		t.Fatal(err)
	}
	exec, _ := auditOf(t, js, "retried", 1)
	if exec["r-1"].ResultSHA256 != SHA256Hex([]byte("kept")) {
		t.Fatalf("audit after retry: %+v", exec["r-1"])
	}
	if n := counterValue(t, reader, "toolgate.audit.lost"); n != 0 {
		t.Fatalf("%d audit events counted lost", n)
	}
	if n := counterValueWith(t, reader, "toolgate.calls", attribute.String("outcome", "ok")); n != 1 {
		t.Fatalf("toolgate.calls{outcome=ok} = %d, want 1", n)
	}
}

func counterValue(t *testing.T, r sdkmetric.Reader, name string) int64 {
	return counterValueWith(t, r, name)
}

func counterValueWith(t *testing.T, r sdkmetric.Reader, name string, match ...attribute.KeyValue) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				t.Fatalf("%s is a %T", name, m.Data)
			}
		points:
			for _, dp := range sum.DataPoints {
				for _, kv := range match {
					if v, ok := dp.Attributes.Value(kv.Key); !ok || v != kv.Value {
						continue points
					}
				}
				n += dp.Value
			}
		}
	}
	return n
}

// storedAudit stops the worker, so that every audit publish is stored,
// and reads every audit event stored for agent, in order.
func storedAudit(t *testing.T, rw *running, js jetstream.JetStream, agent string) []events.AuditData {
	t.Helper()
	if err := rw.stop(); err != nil {
		t.Fatal(err)
	}
	subject := events.AuditSubject(agent, ">")
	st, err := js.Stream(ctxT(t), bus.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctxT(t), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	cons, err := js.OrderedConsumer(ctxT(t), bus.StreamAudit, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	var out []events.AuditData
	for uint64(len(out)) < n {
		m, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
		if err != nil {
			t.Fatalf("audit events: %d of %d: %v", len(out), n, err)
		}
		var a events.AuditData
		ev, err := events.DecodeData(m.Headers(), m.Data(), &a)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]string{events.AuditExecution: events.TypeCallAudited, events.AuditDecision: events.TypeDecisionAudited}[a.Kind]; ev.Type() != want {
			t.Fatalf("a %s event of kind %q", ev.Type(), a.Kind)
		}
		out = append(out, a)
	}
	return out
}

// TestEveryDecisionAuditedWhateverTheFate: the gate's decision is stored
// for every fate of a call that reached the gate, published after the
// call's result, with the result's status, and nothing else is: allowed
// and run, allowed and failed, denied - one execution event carrying the
// gate's decision (decided_by policy, decided_at); asked on a worker
// without approvals (the run turned the gate's ask into a denial) - a
// decision event saying ask and an execution event saying deny. No
// decision is left waiting in the worker.
func TestEveryDecisionAuditedWhateverTheFate(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	gate := textGate()
	rw := startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: fastBus}, tools.WithGate(gate))
	c, nc := newClient(t, s, "fates")
	js, _ := jetstream.New(nc)
	cases := []struct {
		id, tool, text string
		status         events.Status
		gate, executed string // the gate's action; the execution event's (empty: the same, folded)
	}{
		{"f-allow", "echo", "hi", events.StatusOK, "allow", ""},
		{"f-fail", "fail", "", events.StatusError, "allow", ""},
		{"f-deny", "echo", "deny", events.StatusDenied, "deny", ""},
		{"f-ask", "echo", "ask", events.StatusDenied, "ask", "deny"},
	}
	for _, tc := range cases {
		args := map[string]any{"text": tc.text}
		if tc.tool == "fail" {
			args = map[string]any{}
		}
		res, err := c.Call(ctxT(t), tc.tool, args, client.WithID(tc.id))
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != tc.status {
			t.Fatalf("%s: result %s, want %s: %s", tc.id, res.Status, tc.status, res.Output)
		}
	}
	byCall := map[string][]events.AuditData{}
	for _, a := range storedAudit(t, rw, js, "fates") {
		byCall[a.CallID] = append(byCall[a.CallID], a)
	}
	left := 0
	rw.w.decisions.Range(func(any, any) bool { left++; return true })
	if left != 0 {
		t.Errorf("%d decision audit events still waiting in the worker", left)
	}
	for _, tc := range cases {
		got := byCall[tc.id]
		if tc.executed == "" {
			if len(got) != 1 {
				t.Errorf("%s: %d audit events, want 1: %+v", tc.id, len(got), got)
				continue
			}
			e := got[0]
			if e.Kind != events.AuditExecution || e.Status != tc.status || e.Decision == nil || e.Decision.Action != tc.gate ||
				e.Decision.Rule != "test."+tc.gate || strings.Join(e.DecidedBy, ",") != "policy" || e.DecidedAt.IsZero() || e.ArgsSHA256 == "" {
				t.Errorf("%s: execution audit with the gate's decision folded in: %+v", tc.id, e)
			}
			continue
		}
		if len(got) != 2 {
			t.Errorf("%s: %d audit events, want 2: %+v", tc.id, len(got), got)
			continue
		}
		d, e := got[0], got[1]
		if d.Kind != events.AuditDecision || d.Decision == nil || d.Decision.Action != tc.gate || strings.Join(d.DecidedBy, ",") != "policy" ||
			d.Status != tc.status || d.ArgsSHA256 == "" || d.ArgsSHA256 != e.ArgsSHA256 {
			t.Errorf("%s: decision audit %+v", tc.id, d)
		}
		if e.Kind != events.AuditExecution || e.Decision == nil || e.Decision.Action != tc.executed || len(e.DecidedBy) != 0 ||
			!e.DecidedAt.IsZero() || e.Status != tc.status {
			t.Errorf("%s: execution audit %+v", tc.id, e)
		}
	}
}

// TestStringSHA256HexIsSHA256Hex: the buffered hash of an output equals
// the hash of its bytes at every length around the buffer's edges.
func TestStringSHA256HexIsSHA256Hex(t *testing.T) {
	for _, n := range []int{0, 1, 63, 64, 65, 511, 512, 513, 1024, 1025, 100_000} {
		s := strings.Repeat("0123456789abcdef", n/16+1)[:n]
		if got, want := stringSHA256Hex(s), SHA256Hex([]byte(s)); got != want {
			t.Errorf("length %d: %s, want %s", n, got, want)
		}
	}
}

// TestInterruptedCallIsAuditedAsAllowed: a claimed call's heartbeats keep
// the gate's decision in its record; a redelivery that finds the call's
// worker gone answers interrupted, and its one audit event says both
// that the gate allowed the call (its rule, decided_by policy, when) and
// that it was interrupted.
func TestInterruptedCallIsAuditedAsAllowed(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	gate := policy.EvaluatorFunc(func(_ context.Context, r policy.Request) policy.Decision {
		return policy.Decision{Action: policy.Allow, Rule: "test.allow", Revision: "r1"}
	})
	rw := startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: fastBus}, tools.WithGate(gate))
	c, nc := newClient(t, s, "gone")
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctxT(t), bus.BucketCalls)
	if err != nil {
		t.Fatal(err)
	}

	// A running call's heartbeats (every third of the 2 s ack wait) leave
	// the gate's decision in its record; the call is cancelled once seen.
	callCtx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Call(callCtx, "sleep", map[string]any{"ms": 120000}, client.WithID("i-long"))
		done <- err
	}()
	var rec record
	for deadline := time.Now().Add(time.Minute); rec.Decision == nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no heartbeat wrote the gate's decision into the running call's record within a minute")
		}
		if e, err := kv.Get(ctxT(t), CallKey("gone", "i-long")); err == nil {
			rec = record{}
			_ = json.Unmarshal(e.Value(), &rec)
		}
	}
	if rec.Decision.Rule != "test.allow" || rec.DecidedAt.IsZero() || rec.DecidedAt.Location() != time.UTC {
		t.Fatalf("the record of a running call: %+v", rec)
	}
	cancel()
	testenv.Recv(t, done, "the cancelled call's end")

	// A worker that died running a call: its record, heartbeats stopped.
	decidedAt := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	dead, _ := json.Marshal(record{State: stateRunning, Worker: "crashed", Started: decidedAt, Heartbeat: decidedAt,
		Decision: &events.Decision{Action: "allow", Rule: "test.allow", Revision: "r0"}, DecidedAt: decidedAt})
	if _, err := kv.Create(ctxT(t), CallKey("gone", "i-dead"), dead); err != nil {
		t.Fatal(err)
	}
	res, err := c.Call(ctxT(t), "echo", map[string]any{"text": "again"}, client.WithID("i-dead"))
	if err != nil || res.Status != events.StatusInterrupted || res.Decision == nil || res.Decision.Revision != "r0" {
		t.Fatalf("the redelivery of a call whose worker died: %+v %v", res, err)
	}
	if n := ctr.get("i-dead"); n != 0 {
		t.Fatalf("an interrupted call ran again (%d)", n)
	}
	var got []events.AuditData
	for _, a := range storedAudit(t, rw, js, "gone") {
		if a.CallID == "i-dead" {
			got = append(got, a)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%d audit events of the interrupted call, want 1: %+v", len(got), got)
	}
	a := got[0]
	if a.Kind != events.AuditExecution || a.Status != events.StatusInterrupted || a.Decision == nil || a.Decision.Action != "allow" ||
		a.Decision.Revision != "r0" || strings.Join(a.DecidedBy, ",") != "policy" || !a.DecidedAt.Equal(decidedAt) {
		t.Errorf("the interrupted call's audit: %+v", a)
	}
}

// textGate decides by the call's text argument: "deny" denies, "ask"
// asks, anything else is allowed.
func textGate() policy.Evaluator {
	return policy.EvaluatorFunc(func(_ context.Context, r policy.Request) policy.Decision {
		switch r.Arguments["text"] {
		case "deny":
			return policy.Decision{Action: policy.Deny, Reason: "no", Rule: "test.deny"}
		case "ask":
			return policy.Decision{Action: policy.Ask, Reason: "a person decides", Rule: "test.ask"}
		}
		return policy.Decision{Action: policy.Allow, Rule: "test.allow"}
	})
}
