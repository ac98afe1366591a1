package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/policyreplay"
	"github.com/toolgate/toolgate/internal/teststack"
	"github.com/toolgate/toolgate/internal/toolctl"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/trust/trusttest"
)

// replayRunPolicy is the policy the calls run under: reads allowed but
// keys, writes asked (denied to bots), shell commands allowlisted with a
// person asked about the rest.
const replayRunPolicy = `
tools:
  read: {action: allow, constraints: {denied_paths: ["**/*.pem"]}}
  write: ask
  bash:
    security: allowlist
    ask: on_miss
    whitelist: ["ls *", "ls", "cat *", "git status", "echo *"]
agents:
  bot-*:
    tools: {write: deny}
examples:
  - {tool: read, args: {path: keys/server.pem}, expect: deny}
  - {tool: write, agent: bot-1, args: {path: x, content: y}, expect: deny}
`

// The two policies replayed: a stricter one (bots lose the shell, every
// write is denied, README.md is off limits) and a looser one (the
// built-in policy).
const replayStrictPolicy = `
tools:
  read: {action: allow, constraints: {denied_paths: ["**/*.pem", "**/README.md"]}}
  write: deny
  bash:
    security: allowlist
    ask: on_miss
    whitelist: ["ls *", "ls", "cat *", "git status"]
agents:
  bot-*:
    tools: {bash: deny}
`

// replayCall is one call the test makes and what the gate said then.
type replayCall struct {
	id, agent, tool string
	args            map[string]any
	approve         bool // asked, and a person approves it
	then            policy.Action
}

// TestPolicyReplayEndToEnd runs a worker under one policy, makes a mix of
// calls through the bus (allowed, asked and approved, denied; bash, read,
// write; two agents), and replays two other policies over the audit
// trail: every change reported is the change a live call under the new
// policy shows today, and nothing else is reported. The policy in force
// replays to no change; a window without calls says so; a tampered trail
// is reported and never replayed.
func TestPolicyReplayEndToEnd(t *testing.T) {
	s := teststack.StartApprovalStack(t, replayRunPolicy)
	p := asProcess(s.Worker)
	ws := p.ws
	writeFile(t, filepath.Join(ws, "README.md"), "# readme\n")
	writeFile(t, filepath.Join(ws, "keys", "server.pem"), "-----BEGIN KEY-----\n")
	writeFile(t, filepath.Join(ws, "notes.txt"), "notes\n")
	if err := os.Symlink(filepath.Join(ws, "keys", "server.pem"), filepath.Join(ws, "link.txt")); err != nil {
		t.Fatal(err)
	}
	calls := []replayCall{
		{"r-read", "dev-1", "read", map[string]any{"path": "README.md"}, false, policy.Allow},
		{"r-link", "dev-1", "read", map[string]any{"path": "link.txt"}, false, policy.Deny},
		{"r-compound", "dev-1", "bash", map[string]any{"command": "ls -la && cat README.md"}, false, policy.Allow},
		{"r-shc", "dev-1", "bash", map[string]any{"command": "sh -c 'cat README.md'"}, false, ""},
		{"r-catlink", "dev-1", "bash", map[string]any{"command": "cat link.txt"}, false, ""},
		{"r-rm", "dev-1", "bash", map[string]any{"command": "rm -rf build"}, true, policy.Ask},
		{"r-write", "dev-1", "write", map[string]any{"path": "notes.txt", "content": "a payload never audited\n"}, true, policy.Ask},
		{"b-write", "bot-1", "write", map[string]any{"path": "x.txt", "content": "bot payload\n"}, false, policy.Deny},
		{"b-git", "bot-1", "bash", map[string]any{"command": "git status"}, false, policy.Allow},
		{"b-read", "bot-1", "read", map[string]any{"path": "README.md"}, false, policy.Allow},
	}
	run := mustParse(t, replayRunPolicy)
	for i, c := range calls {
		live := policy.NewGate(run).Evaluate(context.Background(), liveRequest(c, ws))
		if c.then == "" {
			calls[i].then = live.Action
		} else if live.Action != c.then {
			t.Fatalf("%s: the run policy says %s (%s), the test expects %s", c.id, live.Action, live.Reason, c.then)
		}
		calls[i].approve = calls[i].then == policy.Ask
	}
	for _, c := range calls {
		cl := p.client(t, c.agent)
		if c.approve {
			final := submitParkedCall(t, cl, c)
			approveCall(t, s.URL, c.id)
			if r := wait(t, final); r.Status == events.StatusDenied {
				t.Fatalf("%s: approved, yet %s", c.id, r.Status)
			}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		res, err := cl.Call(ctx, c.tool, c.args, client.WithID(c.id))
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", c.id, err)
		}
		switch c.then {
		case policy.Allow:
			if res.Decision == nil || res.Decision.Action != "allow" {
				t.Fatalf("%s: %+v", c.id, res)
			}
		case policy.Deny:
			if res.Status != events.StatusDenied {
				t.Fatalf("%s: %s, want denied", c.id, res.Status)
			}
		}
	}

	dir := t.TempDir()
	file := func(name, doc string) string {
		f := filepath.Join(dir, name)
		writeFile(t, f, doc)
		return f
	}
	// The policy in force changes nothing once every call is audited.
	same := file("same.yaml", replayRunPolicy)
	eventually(t, "every call audited", func() (bool, string) {
		out, errOut, code := p.toolctl(t, "policy", "replay", same, "--json")
		sum := replaySummary(t, out)
		return code == toolctl.ExitOK && sum.Calls == len(calls) && sum.Judged == len(calls), fmt.Sprintf("%d %s %s", code, out, errOut)
	})
	// Nothing of the payloads reached the audit.
	if out, _, _ := p.toolctl(t, "audit", "--json"); strings.Contains(out, "payload") || !strings.Contains(out, `"judged"`) {
		t.Errorf("the audit holds a payload, or no view of the calls:\n%s", out)
	}

	strictNow := map[string]policy.Action{} // what the strict replay says each call gets now
	for _, tc := range []struct {
		name, doc string
		// must are changes the test knows by heart (call id → now).
		must map[string]policy.Action
	}{
		{"strict", replayStrictPolicy, map[string]policy.Action{"r-read": policy.Deny, "b-read": policy.Deny, "b-git": policy.Deny, "r-write": policy.Deny}},
		{"builtin", string(policy.DefaultDocument()), map[string]policy.Action{"b-write": policy.Allow, "r-write": policy.Allow}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := mustParse(t, tc.doc)
			want := map[string]policyreplay.Change{}
			for _, c := range calls {
				now := policy.NewGate(pol).Evaluate(context.Background(), liveRequest(c, ws))
				if now.Action != c.then {
					want[c.id] = policyreplay.Change{CallID: c.id, Agent: c.agent, Tool: c.tool,
						Before: policyreplay.Verdict{Action: string(c.then)}, After: policyreplay.Verdict{Action: string(now.Action), Rule: now.Rule}}
				}
			}
			for id, a := range tc.must {
				if want[id].After.Action != string(a) {
					t.Fatalf("the live gate under %s: %s is %+v, the test knows %s", tc.name, id, want[id], a)
				}
			}
			f := file(tc.name+".yaml", tc.doc)
			htmlFile := filepath.Join(dir, tc.name+".html")
			out, errOut, code := p.toolctl(t, "policy", "replay", f, "--json", "--html", htmlFile)
			if code != toolctl.ExitChanged {
				t.Fatalf("replay exit %d, want %d\n%s%s", code, toolctl.ExitChanged, out, errOut)
			}
			got := map[string]policyreplay.Change{}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			for _, l := range lines[:len(lines)-1] {
				var c policyreplay.Change
				if err := json.Unmarshal([]byte(l), &c); err != nil {
					t.Fatalf("%q: %v", l, err)
				}
				got[c.CallID] = c
			}
			if tc.name == "strict" {
				for _, c := range calls {
					strictNow[c.id] = c.then
					if g, ok := got[c.id]; ok {
						strictNow[c.id] = policy.Action(g.After.Action)
					}
				}
			}
			if len(got) != len(want) {
				t.Errorf("%d changes reported, %d known:\n%s", len(got), len(want), out)
			}
			for id, w := range want {
				g, ok := got[id]
				if !ok || g.Agent != w.Agent || g.Tool != w.Tool || g.Before.Action != w.Before.Action || g.After.Action != w.After.Action ||
					g.After.Rule != w.After.Rule || g.After.Reason == "" || g.Before.Rule == "" || g.Time.IsZero() {
					t.Errorf("%s: reported %+v, live %+v", id, g, w)
				}
			}
			sum := replaySummary(t, out)
			counted := 0
			for _, n := range sum.Changes {
				counted += n
			}
			if sum.Calls != len(calls) || counted != len(want) || sum.Unchanged != len(calls)-len(want) || sum.NotReplayable != 0 {
				t.Errorf("summary %+v, want %d calls, %d changed", sum, len(calls), len(want))
			}
			if !strings.Contains(errOut, "replay page: file://"+htmlFile) {
				t.Errorf("the page's address is not printed: %s", errOut)
			}
			page, err := os.ReadFile(htmlFile)
			if err != nil || strings.Count(string(page), "<tr><td>") != len(want) {
				t.Errorf("page: %v, %d rows, want %d", err, strings.Count(string(page), "<tr><td>"), len(want))
			}
			// The text form names each change's call.
			text, _, code := p.toolctl(t, "policy", "replay", f)
			for id := range want {
				if code != toolctl.ExitChanged || !strings.Contains(text, id) {
					t.Errorf("text output (exit %d) lacks %s:\n%s", code, id, text)
				}
			}
		})
	}

	// Filters and an empty window.
	strict := file("strict2.yaml", replayStrictPolicy)
	out, _, code := p.toolctl(t, "policy", "replay", strict, "--json", "--agent", "bot-*", "--tool", "read")
	if sum := replaySummary(t, out); code != toolctl.ExitChanged || sum.Calls != 1 || sum.Changes["allow→deny"] != 1 {
		t.Errorf("--agent bot-* --tool read: exit %d\n%s", code, out)
	}
	out, _, code = p.toolctl(t, "policy", "replay", strict, "--until", "2000-01-01T00:00:00Z")
	if code != toolctl.ExitOK || !strings.Contains(out, "no audited calls") {
		t.Errorf("empty window: exit %d\n%s", code, out)
	}

	// Tampering: an audit event removed from the middle of the chain.
	tamperAudit(t, p.url)
	out, errOut, code := p.toolctl(t, "policy", "replay", strict)
	if code != toolctl.ExitFailed || !strings.Contains(errOut, "BROKEN") || !strings.Contains(errOut, "nothing replayed") || strings.Contains(out, "calls judged") {
		t.Fatalf("replay over a tampered trail: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}

	// Run both: the worker now follows the strict policy, and each call
	// made again live (judge-only: nothing runs) gets the decision the
	// replay said it would.
	writeFile(t, s.Policy, replayStrictPolicy)
	eventually(t, "the strict policy in force", func() (bool, string) {
		a, rule := liveDecision(t, p, calls[len(calls)-1], "reload")
		return a == policy.Deny, string(a) + " " + rule
	})
	for _, c := range calls {
		if a, rule := liveDecision(t, p, c, "live"); a != strictNow[c.id] {
			t.Errorf("%s live under the strict policy: %s by %s; the replay said %s", c.id, a, rule, strictNow[c.id])
		}
	}
}

// liveDecision makes c again as a judge-only call and returns the
// gate's action on it: an asked call's is read from its pending result.
func liveDecision(t *testing.T, p *process, c replayCall, tag string) (policy.Action, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pending := make(chan events.ResultData, 1)
	done := make(chan *events.ResultData, 1)
	go func() {
		res, _ := p.client(t, c.agent).Call(ctx, c.tool, c.args, client.WithID(c.id+"-"+tag+"-"+events.NewID()), client.JudgeOnly(),
			client.OnPending(func(r events.ResultData) { pending <- r }))
		done <- res
	}()
	select {
	case r := <-pending:
		cancel()
		<-done
		if r.Decision == nil {
			return "", "no decision"
		}
		return policy.Action(r.Decision.Action), r.Decision.Rule
	case r := <-done:
		if r == nil || r.Decision == nil {
			t.Fatalf("%s: no decision: %+v", c.id, r)
		}
		return policy.Action(r.Decision.Action), r.Decision.Rule
	}
}

func mustParse(t *testing.T, doc string) *policy.Policy {
	t.Helper()
	p, _, err := policy.Parse([]byte(doc), "test")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func liveRequest(c replayCall, ws string) policy.Request {
	k, _ := policy.BuiltinKind(c.tool)
	return policy.Request{Agent: c.agent, Tool: c.tool, Known: true, Kind: k, Arguments: c.args, Workspace: ws}
}

func replaySummary(t *testing.T, out string) policyreplay.Summary {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var s struct {
		Summary policyreplay.Summary `json:"summary"`
	}
	_ = json.Unmarshal([]byte(lines[len(lines)-1]), &s)
	return s.Summary
}

func submitParkedCall(t *testing.T, cl *client.Client, rc replayCall) <-chan *events.ResultData {
	t.Helper()
	switch rc.tool {
	case "write":
		return teststack.SubmitWrite(t, cl, rc.id, rc.args["path"].(string), rc.args["content"].(string))
	default:
		return teststack.SubmitBash(t, cl, rc.id, rc.args["command"].(string))
	}
}

// approveCall approves a parked call as alice through the approver.
func approveCall(t *testing.T, base, id string) {
	t.Helper()
	if code := (&approvalStack{url: base}).api(t, "POST", "/api/approvals/"+id+"/approve", `{"comment":"ok"}`, nil); code != 200 {
		t.Fatalf("approve %s: %d", id, code)
	}
}

// tamperAudit deletes an audit event from the middle of the stream.
func tamperAudit(t *testing.T, url string) {
	t.Helper()
	nc, _, err := identity.Dial(url, "", identity.RoleAdmin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	st, err := js.Stream(ctx, bus.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for seq := uint64(1); ; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			break
		}
		if !strings.HasPrefix(m.Subject, events.AuditCheckpointSubject("")) {
			seqs = append(seqs, seq)
		}
	}
	if len(seqs) < 3 {
		t.Fatalf("%d audit events", len(seqs))
	}
	if err := st.DeleteMsg(ctx, seqs[len(seqs)/2]); err != nil {
		t.Fatal(err)
	}
}

// TestBrokenExampleIsRefusedEverywhere: one example of a policy broken
// (it expects what the policy does not decide) and lint, test, push and a
// worker start all refuse the policy, naming the example; the fleet's
// policy stays the one in force.
func TestBrokenExampleIsRefusedEverywhere(t *testing.T) {
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "hello\n")
	p := startProcess(t, ws, nil)
	broken := strings.Replace(replayRunPolicy, "{tool: read, args: {path: keys/server.pem}, expect: deny}",
		"{tool: read, args: {path: keys/server.pem}, expect: allow}", 1)
	file := filepath.Join(t.TempDir(), "broken.yaml")
	writeFile(t, file, broken)
	for _, args := range [][]string{{"policy", "lint", file}, {"policy", "test", file}} {
		out, errOut, code := p.toolctl(t, args...)
		if code != toolctl.ExitFailed || !strings.Contains(out+errOut, "examples[0]") || !strings.Contains(out+errOut, "got deny by tools.read.constraints.denied_paths[0]") {
			t.Errorf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	admin := trusttest.CredsFile(t, installUser(t, identity.RoleAdmin, "admin"))
	if _, errOut, code := p.toolctl(t, "policy", "push", file, "--creds", admin); code == toolctl.ExitOK || !strings.Contains(errOut, "examples[0]") {
		t.Errorf("push: exit %d, %s", code, errOut)
	}
	if r := call(t, p.client(t, "agent-x"), "read", `{"path":"README.md"}`); r.Status != events.StatusOK {
		t.Errorf("the policy in force changed: %+v", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := daemon.Run(ctx, daemon.Options{Listen: "127.0.0.1:0", DataDir: stateTempDir(t), Workspace: ws, PolicyFile: file,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Out: io.Discard})
	if !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), "examples[0]") {
		t.Fatalf("a worker started with the policy: %v", err)
	}
}
