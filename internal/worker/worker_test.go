package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/version"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

func TestHappyPathEachMode(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: fastBus})
	for _, mode := range []events.Mode{events.Binary, events.Structured, events.StructuredBare} {
		t.Run(mode.String(), func(t *testing.T) {
			c, nc := newClient(t, s, "agent-1", client.WithMode(mode))
			// Watch the raw result message to check its content mode.
			raw, err := nc.SubscribeSync(events.ResultsOf("agent-1"))
			if err != nil {
				t.Fatal(err)
			}
			id := "happy-" + strings.ReplaceAll(mode.String(), "-", "")
			res, err := c.Call(ctxT(t), "echo", map[string]any{"text": "hello " + mode.String()}, client.WithID(id))
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != events.StatusOK || res.Output != "hello "+mode.String() || res.IsError || res.CallID != id || res.Tool != "echo" {
				t.Fatalf("result = %+v", res)
			}
			if res.Decision == nil || res.Decision.Action != "allow" {
				t.Fatalf("decision = %+v", res.Decision)
			}
			m, err := raw.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			_, got, err := events.Decode(m.Header, m.Data)
			if err != nil || got != mode {
				t.Fatalf("result came back in mode %v (err %v), want %v", got, err, mode)
			}
			if ctr.get(id) != 1 {
				t.Fatalf("executions of %s = %d, want 1", id, ctr.get(id))
			}
		})
	}
}

func TestToolFailureIsAResultNotAWorkerFailure(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: fastBus})
	c, _ := newClient(t, s, "a")
	res, err := c.Call(ctxT(t), "fail", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != events.StatusError || !res.IsError || res.Output != "no such thing" || res.Error != "" {
		t.Fatalf("result = %+v", res)
	}
}

func TestTwoWorkersShareTheLoadAndNoCallRunsTwice(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	reg := testRegistry(t, &ctr, nil)
	w1 := startWorker(t, s.ClientURL(), reg, Config{Name: "w1", Concurrency: 4, Bus: fastBus})
	w2 := startWorker(t, s.ClientURL(), reg, Config{Name: "w2", Concurrency: 4, Bus: fastBus})
	c, _ := newClient(t, s, "fleet")
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res, err := c.Call(ctxT(t), "sleep", map[string]any{"ms": 2}, client.WithID(fmt.Sprintf("load-%d", i)))
			if err == nil && res.Status != events.StatusOK {
				err = fmt.Errorf("call %d: %+v", i, res)
			}
			errs <- err
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	calls, runs := ctr.total()
	if calls != n || runs != n {
		t.Fatalf("%d distinct calls ran %d times, want %d and %d", calls, runs, n, n)
	}
	e1, e2 := w1.w.Executions(), w2.w.Executions()
	if e1+e2 != n || e1 == 0 || e2 == 0 {
		t.Fatalf("worker executions %d + %d, want both > 0 summing to %d", e1, e2, n)
	}
}

func TestDuplicatePublishRepublishesWithoutRunningAgain(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: fastBus})
	// Structured-bare events carry no Nats-Msg-Id, as the CloudEvents SDKs
	// send them, so stream dedup cannot help: the call-id claim must.
	nc, js := s.Connect(t)
	sub, _ := nc.SubscribeSync(events.ResultSubject("dup", "dup-1"))
	ev, _ := events.NewCall("dup-1", "dup", events.CallData{Arguments: json.RawMessage(`{"text":"once"}`)})
	b, _ := json.Marshal(ev)
	for i := 0; i < 3; i++ {
		if _, err := js.Publish(ctxT(t), events.CallSubject("dup", "echo"), b); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("result %d: %v", i, err)
		}
		var r events.ResultData
		if _, err := events.DecodeData(m.Header, m.Data, &r); err != nil || r.Status != events.StatusOK || r.Output != "once" {
			t.Fatalf("result %d = %+v, %v", i, r, err)
		}
	}
	if n := ctr.get("dup-1"); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

// A call's result is stored, then its worker dies before acking the
// message: the redelivery republishes the stored result instead of
// running the call again, whether the call was claimed (echo) or ran
// unclaimed (peek, a pure tool), and the results stream holds one result.
func TestRedeliveryAfterResultDoesNotRunAgain(t *testing.T) {
	for _, tool := range []string{"echo", "peek"} {
		t.Run(tool, func(t *testing.T) {
			var ctr counter
			id := "redeliver-" + tool
			r := resultAfterCrashBeforeAck(t, testRegistry(t, &ctr, nil), tool, id)
			if r.Status != events.StatusOK || r.Output != "x" {
				t.Fatalf("republished = %+v", r)
			}
			if n := ctr.get(id); n != 1 {
				t.Fatalf("executions = %d, want 1", n)
			}
		})
	}
}

// resultAfterCrashBeforeAck makes the call id of tool with text "x" on a
// worker that publishes its result and then "crashes" before it acks, so
// that the message is redelivered after the ack wait to a second worker,
// and returns the result that redelivery publishes; by then the queue is
// empty and the results stream holds one result for the call.
func resultAfterCrashBeforeAck(t *testing.T, reg *tools.Registry, tool, id string) events.ResultData {
	t.Helper()
	s := testenv.StartNATS(t, "")
	crashy := startWorker(t, s.ClientURL(), reg, Config{Name: "crashy", Bus: fastBus})
	crashy.w.beforeAck = func() bool { return false }
	c, nc := newClient(t, s, "r")
	sub, _ := nc.SubscribeSync(events.ResultSubject("r", id))
	if _, err := c.Submit(ctxT(t), tool, map[string]any{"text": "x"}, client.WithID(id)); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := crashy.stop(); err != nil {
		t.Fatal(err)
	}
	startWorker(t, s.ClientURL(), reg, Config{Name: "healthy", Bus: fastBus})
	m, err := sub.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("no republished result after redelivery: %v", err)
	}
	var r events.ResultData
	if _, err := events.DecodeData(m.Header, m.Data, &r); err != nil {
		t.Fatal(err)
	}
	waitQueueEmpty(t, s)
	storedOnce(t, s, "r", 1)
	return r
}

// waitQueueEmpty waits until the calls stream holds nothing: every call was
// acked or terminated, none blocks the queue.
func waitQueueEmpty(t *testing.T, s *testenv.Server) {
	t.Helper()
	_, js := s.Connect(t)
	for i := 0; i < 300; i++ {
		st, err := js.Stream(ctxT(t), bus.StreamCalls)
		if err == nil && st.CachedInfo().State.Msgs == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, _ := js.Stream(ctxT(t), bus.StreamCalls)
	t.Fatalf("calls stream still holds %d messages", st.CachedInfo().State.Msgs)
}

func TestBadInputGetsAnErrorResultAndLeavesTheWorkerRunning(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: fastBus, MaxPayload: 4096})
	nc, js := s.Connect(t)
	sub, err := nc.SubscribeSync(events.ResultsOf("bad"))
	if err != nil {
		t.Fatal(err)
	}
	auditSub, _ := nc.SubscribeSync(events.SubjectAudit)

	binary := func(id, source, typ, sv string, data string) *nats.Msg {
		m := nats.NewMsg(events.CallSubject("bad", "echo"))
		m.Header.Set("ce-specversion", sv)
		if id != "" {
			m.Header.Set("ce-id", id)
			m.Header.Set(nats.MsgIdHdr, id)
		}
		m.Header.Set("ce-source", source)
		m.Header.Set("ce-type", typ)
		m.Header.Set("content-type", "application/json")
		m.Data = []byte(data)
		return m
	}
	good := `{"arguments":{"text":"hi"}}`
	cases := []struct {
		name    string
		msg     *nats.Msg
		code    string
		id      string // expected call id of the result ("" = seq-based)
		contain string
	}{
		{"not a CloudEvent", &nats.Msg{Subject: events.CallSubject("bad", "echo"), Data: []byte("rm -rf /")}, events.CodeInvalidEvent, "", "not a CloudEvent"},
		{"wrong specversion", binary("b-sv", "agent://bad", events.TypeCallRequested, "0.3", good), events.CodeInvalidEvent, "b-sv", "specversion"},
		{"missing id", binary("", "agent://bad", events.TypeCallRequested, "1.0", good), events.CodeInvalidEvent, "", "no id"},
		{"undecodable JSON data", binary("b-json", "agent://bad", events.TypeCallRequested, "1.0", `{"arguments":`), events.CodeInvalidJSON, "b-json", "data"},
		{"undecodable structured JSON", &nats.Msg{Subject: events.CallSubject("bad", "echo"), Header: nats.Header{"content-type": {events.ContentTypeCE}}, Data: []byte(`{"specversion":"1.0",`)}, events.CodeInvalidJSON, "", "invalid JSON"},
		{"wrong type", binary("b-type", "agent://bad", "com.example.other", "1.0", good), events.CodeInvalidEvent, "b-type", "type"},
		{"source names another agent", binary("b-src", "agent://admin", events.TypeCallRequested, "1.0", good), events.CodeSourceMismatch, "b-src", "agent://admin"},
		{"payload over the limit", binary("b-big", "agent://bad", events.TypeCallRequested, "1.0", `{"arguments":{"text":"`+strings.Repeat("x", 5000)+`"}}`), events.CodePayloadTooLarge, "b-big", "limit is 4096"},
		{"arguments fail the schema", binary("b-schema", "agent://bad", events.TypeCallRequested, "1.0", `{"arguments":{"text":7}}`), events.CodeInvalidArguments, "b-schema", "text"},
		{"unknown field in data", binary("b-field", "agent://bad", events.TypeCallRequested, "1.0", `{"args":{"text":"x"}}`), events.CodeInvalidJSON, "b-field", "args"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := js.PublishMsg(ctxT(t), tc.msg); err != nil {
				t.Fatal(err)
			}
			m, err := sub.NextMsg(10 * time.Second)
			if err != nil {
				t.Fatalf("no error result: %v", err)
			}
			var r events.ResultData
			if _, err := events.DecodeData(m.Header, m.Data, &r); err != nil {
				t.Fatal(err)
			}
			if r.Status != events.StatusError || !r.IsError || r.Error != tc.code || !strings.Contains(r.Output, tc.contain) {
				t.Fatalf("result = %+v, want code %s containing %q", r, tc.code, tc.contain)
			}
			if tc.id != "" && r.CallID != tc.id {
				t.Fatalf("call id %q, want %q", r.CallID, tc.id)
			}
			if tc.id == "" && !strings.HasPrefix(r.CallID, "seq-") {
				t.Fatalf("call id %q, want seq-<n>", r.CallID)
			}
			// The chain's checkpoints (its opening one among them, which a
			// slow start publishes after the subscription) are not the
			// call's audit event.
			am, err := auditSub.NextMsg(10 * time.Second)
			for err == nil && strings.HasPrefix(am.Subject, events.AuditCheckpointSubject("")) {
				am, err = auditSub.NextMsg(10 * time.Second)
			}
			if err != nil {
				t.Fatalf("no audit event: %v", err)
			}
			var a events.AuditData
			if _, err := events.DecodeData(am.Header, am.Data, &a); err != nil || a.CallID != r.CallID || a.Status != events.StatusError {
				t.Fatalf("audit = %+v %v", a, err)
			}
		})
	}
	// Unknown tool, through the client.
	c, _ := newClient(t, s, "bad2")
	res, err := c.Call(ctxT(t), "nope", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Error != events.CodeUnknownTool || !strings.Contains(res.Output, "echo, fail, peek, sleep") {
		t.Fatalf("unknown tool result = %+v", res)
	}
	// The worker still runs calls, and nothing is stuck in the queue.
	res, err = c.Call(ctxT(t), "echo", map[string]any{"text": "still here"})
	if err != nil || res.Output != "still here" {
		t.Fatalf("after bad input: %+v %v", res, err)
	}
	if calls, _ := ctr.total(); calls != 1 {
		t.Fatalf("%d calls executed, want only the good one", calls)
	}
	waitQueueEmpty(t, s)
}

func TestShutdownLetsRunningCallFinish(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	started := make(chan string, 1)
	w := startWorker(t, s.ClientURL(), testRegistry(t, &ctr, started), Config{Bus: fastBus})
	c, nc := newClient(t, s, "sd")
	sub, _ := nc.SubscribeSync(events.ResultSubject("sd", "inflight"))
	if _, err := c.Submit(ctxT(t), "sleep", map[string]any{"ms": 300}, client.WithID("inflight")); err != nil {
		t.Fatal(err)
	}
	testenv.Recv(t, started, "started")
	if err := w.stop(); err != nil {
		t.Fatalf("Run returned %v, want nil", err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r events.ResultData
	if _, err := events.DecodeData(m.Header, m.Data, &r); err != nil || r.Status != events.StatusOK || r.Output != "slept" {
		t.Fatalf("result = %+v %v", r, err)
	}
	waitQueueEmpty(t, s)
}

func TestShutdownGraceOverInterrupts(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	started := make(chan string, 1)
	w := startWorker(t, s.ClientURL(), testRegistry(t, &ctr, started), Config{Bus: fastBus, ShutdownGrace: 100 * time.Millisecond})
	c, nc := newClient(t, s, "sd")
	sub, _ := nc.SubscribeSync(events.ResultSubject("sd", "long"))
	if _, err := c.Submit(ctxT(t), "sleep", map[string]any{"ms": 30000}, client.WithID("long")); err != nil {
		t.Fatal(err)
	}
	testenv.Recv(t, started, "started")
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r events.ResultData
	if _, err := events.DecodeData(m.Header, m.Data, &r); err != nil || r.Status != events.StatusInterrupted || r.Output == "" {
		t.Fatalf("result = %+v %v", r, err)
	}
	if n := ctr.get("long"); n != 1 {
		t.Fatalf("executions = %d", n)
	}
	waitQueueEmpty(t, s)
}

func TestRestartWithCallsQueuedLosesNone(t *testing.T) {
	dir := t.TempDir()
	s := testenv.StartNATS(t, dir)
	var ctr counter
	reg := testRegistry(t, &ctr, nil)
	w := startWorker(t, s.ClientURL(), reg, Config{Bus: fastBus})
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}
	c, _ := newClient(t, s, "q")
	const n = 30
	for i := 0; i < n; i++ {
		if _, err := c.Submit(ctxT(t), "echo", map[string]any{"text": fmt.Sprint(i)}, client.WithID(fmt.Sprintf("queued-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// The server restarts too while the calls wait: they are on disk.
	s = testenv.RestartNATS(t, s)
	startWorker(t, s.ClientURL(), reg, Config{Bus: fastBus})
	c, _ = newClient(t, s, "q")
	for i := 0; i < n; i++ {
		r, err := c.Wait(ctxT(t), fmt.Sprintf("queued-%d", i))
		if err != nil || r.Status != events.StatusOK || r.Output != fmt.Sprint(i) {
			t.Fatalf("queued-%d: %+v %v", i, r, err)
		}
	}
	if calls, runs := ctr.total(); calls != n || runs != n {
		t.Fatalf("calls %d runs %d, want %d", calls, runs, n)
	}
}

func TestProvisionIsIdempotent(t *testing.T) {
	s := testenv.StartNATS(t, "")
	_, js := s.Connect(t)
	ctx := ctxT(t)
	if err := bus.Provision(ctx, js, fastBus); err != nil {
		t.Fatal(err)
	}
	before := map[string]jetstream.StreamConfig{}
	for _, sc := range fastBus.Streams() {
		st, err := js.Stream(ctx, sc.Name)
		if err != nil {
			t.Fatal(err)
		}
		before[sc.Name] = st.CachedInfo().Config
	}
	if err := bus.Provision(ctx, js, fastBus); err != nil {
		t.Fatal(err)
	}
	for name, cfg := range before {
		st, _ := js.Stream(ctx, name)
		if got := st.CachedInfo().Config; fmt.Sprint(got) != fmt.Sprint(cfg) {
			t.Fatalf("stream %s changed:\n%v\n%v", name, cfg, got)
		}
	}
	n := 0
	for range js.StreamNames(ctx).Name() {
		n++
	}
	buckets := 0
	for range js.KeyValueStoreNames(ctx).Name() {
		buckets++
	}
	if want := len(before) + buckets; n != want { // + the KV buckets' streams
		t.Fatalf("%d streams after two provisions, want %d", n, want)
	}
}

func TestPolicyDenyPublishesViolationAndDoesNotRun(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	deny := policy.EvaluatorFunc(func(_ context.Context, r policy.Request) policy.Decision {
		if r.Tool == "echo" {
			return policy.Decision{Action: policy.Deny, Reason: "echo is not for you", Rule: "tools.echo.action", Revision: "r1"}
		}
		return policy.Decision{Action: policy.Allow}
	})
	startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: fastBus}, tools.WithGate(deny))
	c, nc := newClient(t, s, "pv")
	vs, _ := nc.SubscribeSync(events.ViolationSubject("pv"))
	res, err := c.Call(ctxT(t), "echo", map[string]any{"text": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != events.StatusDenied || res.Decision == nil || res.Decision.Rule != "tools.echo.action" {
		t.Fatalf("result = %+v", res)
	}
	m, err := vs.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var v events.ViolationData
	if _, err := events.DecodeData(m.Header, m.Data, &v); err != nil || v.Action != "deny" || v.Rule != "tools.echo.action" || v.Revision != "r1" || v.Agent != "pv" {
		t.Fatalf("violation = %+v %v", v, err)
	}
	if calls, _ := ctr.total(); calls != 0 {
		t.Fatal("a denied call ran")
	}
}

func TestToolTimeout(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: fastBus})
	c, _ := newClient(t, s, "to")
	res, err := c.Call(ctxT(t), "sleep", map[string]any{"ms": 20000}, client.WithTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != events.StatusTimeout || !res.IsError || !strings.Contains(res.Output, "partial") {
		t.Fatalf("result = %+v", res)
	}
}

func TestRegistryEventsAndListing(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	reg := testRegistry(t, &ctr, nil)
	nc, _ := s.Connect(t)
	evs, _ := nc.SubscribeSync(events.Prefix + ".event.tool.>")
	startWorker(t, s.ClientURL(), reg, Config{Bus: fastBus})
	got := map[string]string{}
	for i := 0; i < 4; i++ {
		m, err := evs.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var d events.ToolData
		ev, err := events.DecodeData(m.Header, m.Data, &d)
		if err != nil {
			t.Fatal(err)
		}
		got[d.Name] = ev.Type()
		if d.WorkerVersion == "" || d.WorkerVersion != version.Get().Short() {
			t.Fatalf("%s announced by worker version %q, want %q", d.Name, d.WorkerVersion, version.Get().Short())
		}
	}
	for _, n := range []string{"echo", "sleep", "peek", "fail"} {
		if got[n] != events.TypeToolRegistered {
			t.Fatalf("registered events = %v", got)
		}
	}
	reg.Unregister("fail")
	m, err := evs.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var d events.ToolData
	ev, _ := events.DecodeData(m.Header, m.Data, &d)
	if ev.Type() != events.TypeToolUnregistered || d.Name != "fail" {
		t.Fatalf("got %s %s", ev.Type(), d.Name)
	}
	c, _ := client.New(nc, "lister", trusting(t))
	list, err := c.Tools(ctxT(t))
	if err != nil || len(list) != 3 || list[0].Name != "echo" || list[1].Name != "peek" || list[2].Name != "sleep" {
		t.Fatalf("listing = %+v %v", list, err)
	}
}

func TestCallPastMaxDeliveriesIsDeadLettered(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	cfg := bus.Config{AckWait: 500 * time.Millisecond, MaxDeliver: 2}
	startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: cfg})
	nc, js := s.Connect(t)
	kv, err := js.KeyValue(ctxT(t), bus.BucketCalls)
	if err != nil {
		t.Fatal(err)
	}
	// Another worker holds the claim and stays alive but never finishes
	// (say, partitioned from the stream): every delivery here is handed
	// back until deliveries run out.
	key := CallKey("dl", "stuck-1")
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	hold := func() error {
		rec, _ := json.Marshal(record{State: "running", Worker: "elsewhere", Started: time.Now(), Heartbeat: time.Now()})
		_, err := kv.Put(ctx, key, rec)
		return err
	}
	if err := hold(); err != nil { // the claim exists before the call is sent
		t.Fatal(err)
	}
	go func() {
		for ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond) // a live owner's heartbeat
			_ = hold()
		}
	}()
	results, _ := nc.SubscribeSync(events.ResultSubject("dl", "stuck-1"))
	dlq, _ := nc.SubscribeSync("toolgate.dlq.dl.echo")
	c, _ := client.New(nc, "dl", trusting(t))
	if _, err := c.Submit(ctxT(t), "echo", map[string]any{"text": "x"}, client.WithID("stuck-1")); err != nil {
		t.Fatal(err)
	}
	m, err := results.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("no dead-letter result: %v", err)
	}
	var r events.ResultData
	if _, err := events.DecodeData(m.Header, m.Data, &r); err != nil || r.Error != CodeDeadLetter || r.Status != events.StatusError {
		t.Fatalf("result = %+v %v", r, err)
	}
	dm, err := dlq.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if dm.Header.Get("ce-id") != "stuck-1" || dm.Header.Get("Toolgate-Original-Subject") != "toolgate.call.dl.echo" {
		t.Fatalf("dead letter headers = %v", dm.Header)
	}
	if ctr.get("stuck-1") != 0 {
		t.Fatal("the stuck call ran here")
	}
	waitQueueEmpty(t, s)
}

func TestResultThatCannotBeStoredIsKeptAndPublishedOnRedelivery(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: fastBus, publishTimeout: 300 * time.Millisecond})
	nc, js := s.Connect(t)
	// The results stream goes away (an operator's mistake, a lost stream):
	// the worker cannot store the result and must neither lose it nor run
	// the call again.
	if err := js.DeleteStream(ctxT(t), bus.StreamResults); err != nil {
		t.Fatal(err)
	}
	sub, _ := nc.SubscribeSync(events.ResultSubject("lost", "keep-1"))
	c, _ := client.New(nc, "lost", trusting(t))
	if _, err := c.Submit(ctxT(t), "echo", map[string]any{"text": "kept"}, client.WithID("keep-1")); err != nil {
		t.Fatal(err)
	}
	// Every attempt reaches live subscribers even while it cannot be stored.
	if _, err := sub.NextMsg(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	kv, _ := js.KeyValue(ctxT(t), bus.BucketCalls)
	eventually(t, func() bool {
		e, err := kv.Get(ctxT(t), CallKey("lost", "keep-1"))
		return err == nil && strings.Contains(string(e.Value()), `"state":"done"`)
	})
	if err := bus.Provision(ctxT(t), js, fastBus); err != nil {
		t.Fatal(err)
	}
	r, err := c.Wait(ctxT(t), "keep-1")
	if err != nil || r.Status != events.StatusOK || r.Output != "kept" {
		t.Fatalf("result after the stream came back: %+v %v", r, err)
	}
	if n := ctr.get("keep-1"); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
	waitQueueEmpty(t, s)
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; i < 600; i++ {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("condition never held")
}

// TestNoGoroutineOutlivesTheWorker runs calls of every outcome and checks
// that once the worker stopped, none of the goroutines it started (pool,
// heartbeats, publishers, tools) is left.
func TestNoGoroutineOutlivesTheWorker(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	c, _ := newClient(t, s, "leak")
	w := startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: fastBus})
	for i := 0; i < 50; i++ {
		tool, args := "echo", map[string]any{"text": "x"}
		switch i % 3 {
		case 1:
			tool, args = "fail", nil
		case 2:
			tool, args = "sleep", map[string]any{"ms": 1}
		}
		if _, err := c.Call(ctxT(t), tool, args); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Call(ctxT(t), "sleep", map[string]any{"ms": 10000}, client.WithTimeout(20*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if len(ours()) == 0 {
		t.Fatal("no goroutine of the running worker is seen: the check below would prove nothing")
	}
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}
	var left []string
	for i := 0; i < 100; i++ {
		if left = ours(); len(left) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%d goroutines of the worker outlived it:\n%s", len(left), strings.Join(left, "\n\n"))
}

// ours lists the goroutines running toolgate code, but for tests.
func ours() []string {
	buf := make([]byte, 4<<20)
	var out []string
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "toolgate/toolgate/") && !strings.Contains(g, "testing.tRunner") {
			out = append(out, g)
		}
	}
	return out
}
