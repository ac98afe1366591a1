package test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// The reply-subject class: the server checks the subject a request is
// published to, never its reply subject. An agent naming, as the reply
// of a request it may send, a subject toolgate's streams and buckets
// keep (another agent's results, cancellations, audit, calls, budget
// counters, the policy) must never get the answer published there, by
// the server (JetStream's answers) or by a worker (tool listing,
// cancellation, stored results, tasks).

// replyPolicy runs every tool, the shell included.
const replyPolicy = `tools:
  default: allow
exec:
  security: full
  ask: off
  confirm_dangerous: false
`

// replyStack is a worker process on its embedded server, two agents with
// their own credentials, and a spy: a user of the toolgate account
// without permission limits, hearing everything published there.
type replyStack struct {
	p          *process
	alice, bob *nats.Conn
	spy        *nats.Conn
	spyJS      jetstream.JetStream
	ws         string
}

func startReplyStack(t *testing.T) *replyStack {
	t.Helper()
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "forged.txt"), "FORGED-BY-ALICE\n")
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, replyPolicy)
	p := startProcess(t, ws, func(o *daemon.Options) { o.PolicyFile = pol })
	s := &replyStack{p: p, ws: ws,
		alice: dialAs(t, p.url, identity.RoleAgent, "alice"),
		bob:   dialAs(t, p.url, identity.RoleAgent, "bob")}
	s.spy, s.spyJS = spyConn(t, p.url)
	return s
}

// spyConn connects to url as a user of the install's toolgate account
// with no permission limits.
func spyConn(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	in, err := identity.LoadInstall()
	if err != nil {
		t.Fatal(err)
	}
	nc := testenv.ConnectUnlimited(t, url, in.Account)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// bobCalls makes bob's call of bash command with id and hands its
// result over.
func (s *replyStack) bobCalls(t *testing.T, ctx context.Context, id, command string) <-chan *events.ResultData {
	t.Helper()
	bob, err := client.New(s.bob, "bob")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *events.ResultData, 1)
	go func() {
		res, err := bob.Call(ctx, "bash", map[string]any{"command": command}, client.WithID(id))
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	return done
}

// aliceResult makes alice's own call reading forged.txt and returns its id:
// a stored result whose text alice chose.
func (s *replyStack) aliceResult(t *testing.T, ctx context.Context) string {
	t.Helper()
	c, err := client.New(s.alice, "alice")
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Call(ctx, "read", map[string]any{"path": "forged.txt"}, client.WithID("alice-own-1"))
	if err != nil || res.Status != events.StatusOK || !strings.Contains(res.Output, "FORGED-BY-ALICE") {
		t.Fatalf("alice's own call: %+v %v", res, err)
	}
	return "alice-own-1"
}

// aliceRequests are the requests alice's credentials let her send,
// generated from her permissions: each allowed publish subject with its
// wildcards filled in with own (an id of her own, e.g. a stored result's).
func aliceRequests(own string) []string {
	var out []string
	for _, p := range identity.Permissions(identity.RoleAgent, "alice").Pub.Allow {
		out = append(out, fill(p, own))
	}
	// The services alice reaches, whatever her permissions say; the
	// server refuses those they do not allow.
	out = append(out, "toolgate.api.result.alice."+own, "toolgate.api.task.alice.next",
		"$JS.API.DIRECT.GET.TOOLGATE_RESULTS.toolgate.result.alice."+own)
	slices.Sort(out)
	return slices.Compact(out)
}

// fill replaces the wildcards of subject pattern p with tok.
func fill(p, tok string) string {
	parts := strings.Split(p, ".")
	for i, x := range parts {
		if x == "*" || x == ">" {
			parts[i] = tok
		}
	}
	return strings.Join(parts, ".")
}

// storedTargets are subjects toolgate's streams and buckets keep,
// generated from the streams on the server (every subject filter, its
// wildcards filled in with bob and a fresh token), plus the ones the
// attacks aim at by name.
func storedTargets(t *testing.T, ctx context.Context, js jetstream.JetStream) []string {
	t.Helper()
	var out []string
	n := 0
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		for _, subj := range info.Config.Subjects {
			n++
			parts := strings.Split(subj, ".")
			for i, x := range parts {
				switch x {
				case "*":
					parts[i] = "bob"
				case ">":
					parts[i] = fmt.Sprintf("bob.r%d", n)
				}
			}
			out = append(out, strings.Join(parts, "."))
		}
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 10 {
		t.Fatalf("only %d stream subjects: %v", len(out), out)
	}
	out = append(out,
		"$KV.toolgate_policy.policy",
		"$KV.toolgate_budgets.calls.agent.bob",
		"$KV.toolgate_approvals.call.bob-parked",
		"$KV.toolgate_cancels.bob.bob-parked",
		"toolgate.audit.bob.bash",
		"toolgate.approval.decision.bob-parked",
		"toolgate.cancel.bob.bob-parked",
		"toolgate.call.bob.bash",
		"toolgate.result.bob.bob-parked",
	)
	slices.Sort(out)
	return slices.Compact(out)
}

// listen records what is published on any of subjects in the toolgate
// account.
func listen(t *testing.T, spy *nats.Conn, subjects []string) func() []string {
	t.Helper()
	want := map[string]bool{}
	for _, s := range subjects {
		want[s] = true
	}
	var mu sync.Mutex
	var got []string
	sub, err := spy.Subscribe(">", func(m *nats.Msg) {
		if want[m.Subject] {
			mu.Lock()
			got = append(got, m.Subject)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() []string {
		_ = spy.Flush()
		mu.Lock()
		defer mu.Unlock()
		_ = sub.Unsubscribe()
		slices.Sort(got)
		return slices.Compact(got)
	}
}

// TestReplySubjectsNeverReachStoredSubjects is the generated test: every
// request alice may send, with every subject toolgate's streams and
// buckets keep as its reply subject; nothing is published there, nothing
// is stored.
func TestReplySubjectsNeverReachStoredSubjects(t *testing.T) {
	s := startReplyStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	own := s.aliceResult(t, ctx)
	targets := storedTargets(t, ctx, s.spyJS)
	requests := aliceRequests(own)
	stop := listen(t, s.spy, targets)
	for _, req := range requests {
		for _, target := range targets {
			_ = s.alice.PublishRequest(req, target, nil) // refused ones are async errors
		}
		_ = s.alice.Flush()
	}
	time.Sleep(3 * time.Second) // the answers a worker sends after a wait (the next task: 1 s at least)
	if got := stop(); len(got) > 0 {
		t.Errorf("answers to alice's requests were published on %d subjects streams keep: %v", len(got), got)
	}
	// And stored: nothing on any target (work queues included: nothing
	// was published to them, above).
	for _, target := range targets {
		st, err := s.spyJS.StreamNameBySubject(ctx, target)
		if err != nil {
			continue
		}
		str, err := s.spyJS.Stream(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		if m, err := str.GetLastMsgForSubject(ctx, target); err == nil {
			t.Errorf("stream %s stores %s: %q", st, target, m.Data)
		}
	}
	// Asked with her own inbox as the reply, alice's requests are
	// answered: her stored result, the tool listing.
	c, err := client.New(s.alice, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Result(ctx, own); err != nil || !strings.Contains(r.Output, "FORGED-BY-ALICE") {
		t.Fatalf("alice's own stored result: %+v %v", r, err)
	}
	if tools, err := c.Tools(ctx); err != nil || len(tools) == 0 {
		t.Fatalf("alice's tool listing: %v %v", tools, err)
	}
	t.Logf("%d requests x %d stored subjects", len(requests), len(targets))
}

// TestReplyAttackForgedResult: alice makes bob's waiting call end with a
// result she wrote, by naming bob's result subject as the reply of a read
// of her own stored result.
func TestReplyAttackForgedResult(t *testing.T) {
	s := startReplyStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	own := s.aliceResult(t, ctx)
	done := s.bobCalls(t, ctx, "bob-call-1", "sleep 3; echo bob-real")
	time.Sleep(time.Second) // bob listens and waits
	for _, req := range []string{"$JS.API.DIRECT.GET.TOOLGATE_RESULTS.toolgate.result.alice." + own, "toolgate.api.result.alice." + own} {
		_ = s.alice.PublishRequest(req, events.ResultSubject("bob", "bob-call-1"), nil)
	}
	_ = s.alice.Flush()
	res := testenv.Recv(t, done, "bob's call's end")
	if res == nil || strings.Contains(res.Output, "FORGED-BY-ALICE") || !strings.Contains(res.Output, "bob-real") {
		t.Fatalf("bob's call ended with %+v, want its own result", res)
	}
	str, err := s.spyJS.Stream(ctx, "TOOLGATE_RESULTS")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := str.GetLastMsgForSubject(ctx, events.ResultSubject("bob", "bob-call-1")); err != nil || strings.Contains(string(m.Data), "FORGED") {
		t.Fatalf("bob's stored result: %v %v", m, err)
	}
}

// TestReplyAttackCancelsAnothersCall: alice cancels bob's running call by
// naming bob's cancel subject as the reply of a request of her own.
func TestReplyAttackCancelsAnothersCall(t *testing.T) {
	s := startReplyStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	own := s.aliceResult(t, ctx)
	done := s.bobCalls(t, ctx, "bob-call-2", "sleep 3; echo bob-finished")
	time.Sleep(1500 * time.Millisecond) // running
	for _, req := range aliceRequests(own) {
		_ = s.alice.PublishRequest(req, events.CancelSubject("bob", "bob-call-2"), nil)
	}
	_ = s.alice.Flush()
	res := testenv.Recv(t, done, "bob's call's end")
	if res == nil || res.Status != events.StatusOK || !strings.Contains(res.Output, "bob-finished") {
		t.Fatalf("bob's call ended with %+v, want it run to the end", res)
	}
}

// TestReplyAttackStoredState: alice's answers aimed at the budget
// counters, the policy, the audit trail and the approvals: each bucket
// and stream is as it was.
func TestReplyAttackStoredState(t *testing.T) {
	s := startReplyStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	own := s.aliceResult(t, ctx)
	for _, tc := range []struct{ name, stream, subject string }{
		{"budget counter reset", "KV_toolgate_budgets", "$KV.toolgate_budgets.calls.agent.bob"},
		{"policy key overwritten", "KV_toolgate_policy", "$KV.toolgate_policy.policy"},
		{"audit entry planted", "TOOLGATE_AUDIT", "toolgate.audit.bob.bash"},
		{"approval decided", "TOOLGATE_APPROVALS", "toolgate.approval.decision.bob-parked"},
		{"call record forged", "KV_toolgate_calls", "$KV.toolgate_calls.bob.bob-parked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, req := range aliceRequests(own) {
				_ = s.alice.PublishRequest(req, tc.subject, nil)
			}
			_ = s.alice.Flush()
			time.Sleep(2 * time.Second)
			str, err := s.spyJS.Stream(ctx, tc.stream)
			if err != nil {
				t.Fatal(err)
			}
			if m, err := str.GetLastMsgForSubject(ctx, tc.subject); err == nil {
				t.Fatalf("%s holds %s: %.200q", tc.stream, tc.subject, m.Data)
			}
		})
	}
}

// TestReplyAttackWorkerResponders: the tool listing and the cancellation,
// asked with a reply subject outside the requester's inbox, are answered
// nowhere: not by alice (an agent), not by an admin's connection.
func TestReplyAttackWorkerResponders(t *testing.T) {
	s := startReplyStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin := dialAs(t, s.p.url, identity.RoleAdmin, "admin")
	body, _ := json.Marshal(events.ToolsListRequest{})
	for i, who := range []*nats.Conn{s.alice, admin} {
		target := fmt.Sprintf("toolgate.result.bob.listing-%d", i)
		_ = who.PublishRequest(events.SubjectToolsList, target, body)
		_ = who.PublishRequest(events.CancelSubject("alice", "nothing"), fmt.Sprintf("toolgate.result.bob.cancel-%d", i), nil)
		_ = who.Flush()
	}
	time.Sleep(2 * time.Second)
	str, err := s.spyJS.Stream(ctx, "TOOLGATE_RESULTS")
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"toolgate.result.bob.listing-0", "toolgate.result.bob.listing-1", "toolgate.result.bob.cancel-0"} {
		if m, err := str.GetLastMsgForSubject(ctx, subj); err == nil {
			t.Errorf("a worker's answer is stored on %s: %.200q", subj, m.Data)
		}
	}
	// The same requests with an inbox reply are answered.
	if m, err := s.alice.Request(events.SubjectToolsList, body, 10*time.Second); err != nil || !strings.Contains(string(m.Data), `"read"`) {
		t.Fatalf("alice's own tool listing: %v", err)
	}
	if m, err := admin.Request(events.SubjectToolsList, body, 10*time.Second); err != nil || !strings.Contains(string(m.Data), `"read"`) {
		t.Fatalf("the admin's tool listing: %v", err)
	}
}
