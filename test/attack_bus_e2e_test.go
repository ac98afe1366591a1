package test

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/toolctl"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/trust/trusttest"
)

// The attacks of this file are an agent's, with its own credentials only,
// against what the bus carries for others or keeps as accounts.

// freeAddr is a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// until polls cond until it holds, failing the test after d.
func until(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("condition not met within %s", d)
		}
	}
}

// metricSum adds the values of the Prometheus samples at addr whose line
// starts with name and contains every one of labels.
func metricSum(t *testing.T, addr, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
outer:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue outer
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// TestAttackOneCallIDManyMsgIDsRunsOnce: an agent sends one call id 30
// times at once, each message with a Nats-Msg-Id of its own, for a
// read-only tool under a budget of one call. The tool runs once, however
// the messages interleave: a budgeted call is claimed and charged once
// per (agent, call id). It counts executions (calls that ran to ok),
// not verdicts.
func TestAttackOneCallIDManyMsgIDsRunsOnce(t *testing.T) {
	ws := newWorkspace(t)
	// Enough files that a glob takes a while: the duplicates overlap.
	for i := range 4000 {
		writeFile(t, filepath.Join(ws, fmt.Sprintf("d%d/e%d/f%d.txt", i%40, i%7, i)), "a\n")
	}
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, "tools: {default: allow}\nbudgets:\n  one-glob:\n    tools: [glob]\n    max_calls: 1\n    per: 24h\n")
	metrics := freeAddr(t)
	p := startProcess(t, ws, func(o *daemon.Options) { o.PolicyFile = pol; o.MetricsListen = metrics })
	nc := dialAs(t, p.url, identity.RoleAgent, "mallory")
	admin, err := jetstream.New(dialAs(t, p.url, identity.RoleAdmin, "admin"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const sends = 30
	id := "same-call-id"
	for i := range sends {
		func() {
			ev, err := events.New(id, events.AgentSource("mallory"), events.TypeCallRequested, map[string]any{"arguments": map[string]any{"pattern": "**/*.txt"}})
			if err != nil {
				t.Error(err)
				return
			}
			m, err := events.Encode(events.CallSubject("mallory", "glob"), ev, events.Binary)
			if err != nil {
				t.Error(err)
				return
			}
			m.Header.Set(events.HeaderMsgID, fmt.Sprintf("%s-%d", id, i))
			if err := nc.PublishMsg(m); err != nil { // all at once: no wait for the acks
				t.Error(err)
			}
		}()
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// All stored before the count is awaited.
	until(t, 30*time.Second, func() bool {
		s, err := admin.Stream(ctx, bus.StreamCalls)
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		return err == nil && info.State.LastSeq >= sends
	})
	// Every message is settled when the consumer has none pending or
	// waiting for an ack.
	// A duplicate that found the call running is handed back and settled
	// on its redelivery, an ack wait later.
	until(t, 2*time.Minute, func() bool {
		c, err := admin.Consumer(ctx, bus.StreamCalls, bus.ConsumerWorkers)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	if ran := metricSum(t, metrics, "toolgate_calls_total", `tool="glob"`, `outcome="ok"`); ran != 1 {
		t.Fatalf("one call id under a budget of 1 ran %v times", ran)
	}
}

// TestAttackInvalidSharedPolicyNeverDowngrades: an admin pushed a policy
// that denies read; something else then stores a value under the shared
// policy key that is no sealed policy (as an agent could make the server
// store, answering on $KV.toolgate_policy.policy). A worker that starts
// afterwards applies the last good pushed policy - read stays denied -
// never the built-in default that allows it.
func TestAttackInvalidSharedPolicyNeverDowngrades(t *testing.T) {
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "secret\n")
	data := stateTempDir(t)
	p := startProcess(t, ws, func(o *daemon.Options) { o.DataDir = data })
	admin := trusttest.CredsFile(t, installUser(t, identity.RoleAdmin, "admin"))
	good := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, good, "tools:\n  default: allow\n  read:\n    action: deny\n")
	if out, errOut, code := p.toolctl(t, "policy", "push", good, "--creds", admin); code != toolctl.ExitOK {
		t.Fatalf("push: %d %s %s", code, out, errOut)
	}
	c := p.client(t, "mallory")
	eventually(t, "the pushed policy", func() (bool, string) {
		r := call(t, c, "read", `{"path":"README.md"}`)
		return r.Status == events.StatusDenied, string(r.Status)
	})
	js, err := jetstream.New(dialAs(t, p.url, identity.RoleAdmin, "admin"))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), bus.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), "policy", []byte(`{"status":"ok","output":"not a policy"}`)); err != nil {
		t.Fatal(err)
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	p = startProcess(t, ws, func(o *daemon.Options) { o.DataDir = data })
	if strings.Contains(p.out.String(), "policy builtin") {
		t.Fatalf("the restarted worker fell back to the built-in policy:\n%s", p.out)
	}
	c = p.client(t, "mallory")
	if r := call(t, c, "read", `{"path":"README.md"}`); r.Status != events.StatusDenied || strings.Contains(r.Output, "secret") {
		t.Fatalf("read after a restart over an invalid shared policy: %+v", r)
	}
}

// TestAttackCorruptBudgetCounter: an agent's spent budget counter is
// overwritten - with an empty object, which the old reading took for a
// fresh counter, and with garbage, which refused every call until an
// admin repaired it. Neither frees the budget nor blocks it: the worker
// rebuilds the counter from the audited charges, and the next call is
// refused as spent. It counts executions, not verdicts.
func TestAttackCorruptBudgetCounter(t *testing.T) {
	for _, forged := range []string{`{}`, `garbage`} {
		t.Run(forged, func(t *testing.T) {
			ws := newWorkspace(t)
			writeFile(t, filepath.Join(ws, "README.md"), "hello\n")
			pol := filepath.Join(t.TempDir(), "policy.yaml")
			writeFile(t, pol, "tools: {default: allow}\nbudgets:\n  two-reads:\n    tools: [read]\n    max_calls: 2\n    per: 24h\n")
			metrics := freeAddr(t)
			p := startProcess(t, ws, func(o *daemon.Options) { o.PolicyFile = pol; o.MetricsListen = metrics })
			c := p.client(t, "mallory")
			if r := call(t, c, "read", `{"path":"README.md"}`); r.Status != events.StatusOK {
				t.Fatalf("first read: %+v", r)
			}
			js, err := jetstream.New(dialAs(t, p.url, identity.RoleWorker, "w"))
			if err != nil {
				t.Fatal(err)
			}
			kv, err := js.KeyValue(context.Background(), bus.BucketBudgets)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Put(context.Background(), "two-reads.mallory", []byte(forged)); err != nil {
				t.Fatal(err)
			}
			// The second read is the last the budget allows; the third and
			// fourth are refused.
			var statuses []events.Status
			for range 3 {
				statuses = append(statuses, call(t, c, "read", `{"path":"README.md"}`).Status)
			}
			if ran := metricSum(t, metrics, "toolgate_calls_total", `tool="read"`, `outcome="ok"`); ran != 2 || statuses[0] != events.StatusOK {
				t.Fatalf("reads that ran under a budget of 2 over a forged counter: %v (statuses after the forgery %v)", ran, statuses)
			}
		})
	}
}

// TestAttackForgedResult: results arrive on a parked call's result
// subject that no trusted worker made for it - an unsigned one saying ok,
// and another agent's own result, signed by a real worker, stored again
// on the victim's subject - as the server stored them when an agent named
// that subject as a reply. The victim's client refuses both and goes on
// waiting; approved, the call runs (the worker's resume does not take the
// stored forgery for "finished before") and the real result arrives.
func TestAttackForgedResult(t *testing.T) {
	s := startApprovalStack(t)
	victim := s.worker.client(t, "victim")
	mallory := s.worker.client(t, "mallory")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	own, err := mallory.Call(ctx, "read", map[string]any{"path": "."})
	if err != nil {
		t.Fatal(err)
	}
	final := s.submit(t, victim, "victim-call", "approved.txt", "real\n")

	nc := dialAs(t, s.worker.url, identity.RoleWorker, "w")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subject := events.ResultSubject("victim", "victim-call")
	unsigned, err := events.EncodeData(subject, events.Attrs{ID: "forged-1", Source: "toolgate://worker/w", Type: events.TypeCallCompleted, Subject: "victim-call"},
		events.ResultData{CallID: "victim-call", Agent: "victim", Tool: "write", Status: events.StatusOK, Output: "forged"}, events.Binary)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := js.Stream(ctx, bus.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := stored.GetLastMsgForSubject(ctx, events.ResultSubject("mallory", ownID(t, own)))
	if err != nil {
		t.Fatal(err)
	}
	replayed := &nats.Msg{Subject: subject, Header: raw.Header, Data: raw.Data}
	replayed.Header.Set(events.HeaderMsgID, "forged-2")
	for _, m := range []*nats.Msg{unsigned, replayed} {
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case r := <-final:
		t.Fatalf("the victim's client took a forged result: %+v", r)
	case <-time.After(2 * time.Second):
	}
	var res approver.Result
	if code := s.api(t, "POST", "/api/approvals/victim-call/approve", `{}`, &res); code != 200 {
		t.Fatalf("approve = %d %+v", code, res)
	}
	r := wait(t, final)
	if r.Status != events.StatusOK || strings.Contains(r.Output, "forged") {
		t.Fatalf("final result = %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(s.worker.ws, "approved.txt")); err != nil || string(b) != "real\n" {
		t.Fatalf("the approved write did not run: %q %v", b, err)
	}
	if victim.Refused() < 2 {
		t.Fatalf("the client refused %d results, want both forgeries", victim.Refused())
	}
}

// ownID is the call id of a result.
func ownID(t *testing.T, r *events.ResultData) string {
	t.Helper()
	if r.CallID == "" {
		t.Fatalf("result without a call id: %+v", r)
	}
	return r.CallID
}

// TestAttackForgedAuditEntry: audit events no trusted worker made for
// the agent they name - an unsigned one, and another agent's real one
// stored again under the victim's subject - are not listed by `toolctl
// audit`, which says it refused them and exits non-zero.
func TestAttackForgedAuditEntry(t *testing.T) {
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "hello\n")
	p := startProcess(t, ws, nil)
	for _, agent := range []string{"victim", "mallory"} {
		if r := call(t, p.client(t, agent), "read", `{"path":"README.md"}`); r.Status != events.StatusOK {
			t.Fatalf("%s: %+v", agent, r)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(dialAs(t, p.url, identity.RoleWorker, "w"))
	if err != nil {
		t.Fatal(err)
	}
	forged, err := events.NewMessage(events.AuditSubject("victim", "bash"), "victim.planted:audit", "toolgate://worker/w", events.TypeCallAudited,
		events.AuditData{Kind: events.AuditExecution, CallID: "planted", Agent: "victim", Tool: "bash", Status: events.StatusOK, Time: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	audit, err := js.Stream(ctx, bus.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := audit.GetLastMsgForSubject(ctx, events.AuditSubject("mallory", "read"))
	if err != nil {
		t.Fatal(err)
	}
	replayed := &nats.Msg{Subject: events.AuditSubject("victim", "read"), Header: raw.Header, Data: raw.Data}
	replayed.Header.Set(events.HeaderMsgID, "replayed")
	for _, m := range []*nats.Msg{forged, replayed} {
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code := p.toolctl(t, "audit", "--agent", "victim", "--json")
	if strings.Contains(out, "planted") || strings.Contains(out, "mallory") || !strings.Contains(out, `"agent":"victim"`) {
		t.Fatalf("toolctl audit listed a forged event:\n%s", out)
	}
	if code != toolctl.ExitFailed || strings.Count(errOut, "refused toolgate.audit.victim.") != 2 {
		t.Fatalf("toolctl audit: code %d, stderr:\n%s", code, errOut)
	}
}

// TestAuditVerifyDetectsTampering: a worker's audit events form a signed
// chain with a signed checkpoint; `toolctl audit --verify` finds the trail
// sound, then detects each tampering: an event removed from the stream,
// one changed (stored again with other data, the original removed), one
// inserted (a real event stored a second time), and the chain's last
// event removed (only the checkpoint shows it).
func TestAuditVerifyDetectsTampering(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(t *testing.T, s jetstream.Stream, js jetstream.JetStream, msgs []*jetstream.RawStreamMsg)
		want   string
	}{
		{"removed", func(t *testing.T, s jetstream.Stream, _ jetstream.JetStream, msgs []*jetstream.RawStreamMsg) {
			if err := s.DeleteMsg(context.Background(), msgs[1].Sequence); err != nil {
				t.Fatal(err)
			}
		}, "are missing: removed"},
		{"changed", func(t *testing.T, s jetstream.Stream, js jetstream.JetStream, msgs []*jetstream.RawStreamMsg) {
			m := &nats.Msg{Subject: msgs[1].Subject, Header: msgs[1].Header, Data: []byte(strings.Replace(string(msgs[1].Data), `"ann"`, `"bob"`, 1))}
			m.Header.Set(events.HeaderMsgID, "changed")
			if _, err := js.PublishMsg(context.Background(), m); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteMsg(context.Background(), msgs[1].Sequence); err != nil {
				t.Fatal(err)
			}
		}, "refused"},
		{"inserted", func(t *testing.T, _ jetstream.Stream, js jetstream.JetStream, msgs []*jetstream.RawStreamMsg) {
			m := &nats.Msg{Subject: msgs[1].Subject, Header: msgs[1].Header, Data: msgs[1].Data}
			m.Header.Set(events.HeaderMsgID, "inserted")
			if _, err := js.PublishMsg(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		}, "is stored twice: inserted"},
		{"last removed", func(t *testing.T, s jetstream.Stream, _ jetstream.JetStream, msgs []*jetstream.RawStreamMsg) {
			if err := s.DeleteMsg(context.Background(), msgs[len(msgs)-1].Sequence); err != nil {
				t.Fatal(err)
			}
		}, "the last ones were removed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := newWorkspace(t)
			writeFile(t, filepath.Join(ws, "README.md"), "hello\n")
			data := stateTempDir(t)
			p := startProcess(t, ws, func(o *daemon.Options) { o.DataDir = data })
			c := p.client(t, "ann")
			for range 3 {
				if r := call(t, c, "read", `{"path":"README.md"}`); r.Status != events.StatusOK {
					t.Fatalf("read: %+v", r)
				}
			}
			if err := p.stop(); err != nil { // its last checkpoint is published
				t.Fatal(err)
			}
			p = startProcess(t, ws, func(o *daemon.Options) { o.DataDir = data })
			out, errOut, code := p.toolctl(t, "audit", "--verify")
			if code != toolctl.ExitOK || !strings.Contains(out, "3 events, 3 under a signed checkpoint: ok") {
				t.Fatalf("the untouched trail: %d\n%s%s", code, out, errOut)
			}
			js, err := jetstream.New(dialAs(t, p.url, identity.RoleWorker, "w"))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			s, err := js.Stream(ctx, bus.StreamAudit)
			if err != nil {
				t.Fatal(err)
			}
			var msgs []*jetstream.RawStreamMsg
			for seq := uint64(1); ; seq++ {
				m, err := s.GetMsg(ctx, seq)
				if err != nil {
					break
				}
				if strings.HasPrefix(m.Subject, events.AuditSubject("ann", "")) {
					msgs = append(msgs, m)
				}
			}
			if len(msgs) != 3 { // one per read: its execution, carrying the gate's decision
				t.Fatalf("%d audit events of ann, want 3", len(msgs))
			}
			// In the chain's order, which the stream's may not be: a
			// call's audit events are published beside other calls'.
			chainSeq := func(m *jetstream.RawStreamMsg) uint64 {
				var a events.AuditData
				if _, err := events.DecodeData(m.Header, m.Data, &a); err != nil {
					t.Fatal(err)
				}
				return a.Seq
			}
			slices.SortFunc(msgs, func(a, b *jetstream.RawStreamMsg) int { return cmp.Compare(chainSeq(a), chainSeq(b)) })
			tt.tamper(t, s, js, msgs)
			out, errOut, code = p.toolctl(t, "audit", "--verify")
			if code != toolctl.ExitFailed || !strings.Contains(out, tt.want) {
				t.Fatalf("tampered (%s): %d\n%s%s", tt.name, code, out, errOut)
			}
		})
	}
}

// TestAttackForgedResultToolctl: `toolctl call` waiting for a parked
// call is not answered by an unsigned result planted on its subject: it
// prints the real result once the call is approved.
func TestAttackForgedResultToolctl(t *testing.T) {
	s := startApprovalStack(t)
	type outcome struct {
		out, errOut string
		code        int
	}
	done := make(chan outcome, 1)
	go func() {
		o, e, c := s.worker.toolctl(t, "call", "--id", "tc-1", "write", "path=tc.txt", "content=real")
		done <- outcome{o, e, c}
	}()
	js, err := jetstream.New(dialAs(t, s.worker.url, identity.RoleWorker, "w"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Once the call is parked, a forged final result is stored for it.
	until(t, 30*time.Second, func() bool {
		var list []approver.View
		return s.api(t, "GET", "/api/approvals", "", &list) == 200 && len(list) == 1
	})
	forged, err := events.EncodeData(events.ResultSubject("cli", "tc-1"), events.Attrs{ID: "forged-tc", Source: "toolgate://worker/w",
		Type: events.TypeCallCompleted, Subject: "tc-1"},
		events.ResultData{CallID: "tc-1", Agent: "cli", Tool: "write", Status: events.StatusOK, Output: "forged"}, events.Binary)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, forged); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-done:
		t.Fatalf("toolctl call took a forged result: %d %s %s", o.code, o.out, o.errOut)
	case <-time.After(2 * time.Second):
	}
	if code := s.api(t, "POST", "/api/approvals/tc-1/approve", `{}`, nil); code != 200 {
		t.Fatalf("approve = %d", code)
	}
	o := testenv.Recv(t, done, "toolctl call's end")
	if o.code != toolctl.ExitOK || strings.Contains(o.out, "forged") {
		t.Fatalf("toolctl call: %d %s %s", o.code, o.out, o.errOut)
	}
	if b, err := os.ReadFile(filepath.Join(s.worker.ws, "tc.txt")); err != nil || string(b) != "real" {
		t.Fatalf("the approved write: %q %v", b, err)
	}
}
