package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/toolctl"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/trust/trusttest"
)

func seedPolicy(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../pkg/policy/testdata/seed000.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// eventually retries check until it holds or a minute passes: hot reload
// is asynchronous.
func eventually(t *testing.T, what string, check func() (bool, string)) {
	t.Helper()
	var last string
	for i := 0; i < 600; i++ {
		ok, got := check()
		if ok {
			return
		}
		last = got
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never happened; last: %s", what, last)
}

func call(t *testing.T, c *client.Client, tool, args string) *events.ResultData {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.Call(ctx, tool, json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s %s: %v", tool, args, err)
	}
	return res
}

func TestPolicyFileIsEnforcedAndHotReloaded(t *testing.T) {
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "hello\n")
	writeFile(t, filepath.Join(ws, "server.pem"), "-----BEGIN PRIVATE KEY-----\n")
	// The policy opens /tmp to the tools: the policy and the store must
	// live elsewhere.
	polFile := filepath.Join(stateTempDir(t), "policy.yaml")
	if err := os.WriteFile(polFile, seedPolicy(t), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, ws, func(o *daemon.Options) { o.PolicyFile = polFile; o.DataDir = stateTempDir(t) })
	if !strings.Contains(p.out.String(), "policy file:"+polFile) {
		t.Fatalf("banner does not name the policy:\n%s", p.out)
	}
	c := p.client(t, "agent-p")
	nc, _, err := identity.Dial(p.url, "", identity.RoleAdmin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	violations, _ := nc.SubscribeSync(events.ViolationSubject("agent-p"))
	changes, _ := nc.SubscribeSync(events.PolicyChangeSubject)

	if r := call(t, c, "read_file", `{"path":"README.md"}`); r.Status != events.StatusOK {
		t.Fatalf("read README: %+v", r)
	}
	r := call(t, c, "read", `{"path":"server.pem"}`)
	if r.Status != events.StatusDenied || !strings.Contains(r.Decision.Rule, "denied_paths") {
		t.Fatalf("read server.pem: %+v %+v", r, r.Decision)
	}
	r = call(t, c, "run_shell", `{"command":"ls && rm -rf build"}`)
	if r.Status != events.StatusDenied || r.Decision.Rule != "tools.run_shell.blacklist[0]" || !strings.Contains(r.Decision.Offending, "rm -rf build") {
		t.Fatalf("rm -rf: %+v %+v", r, r.Decision)
	}
	// The policy's constraints bound what the tools return: search_files
	// max_results 100, read_file max_size 10MB.
	for i := 0; i < 150; i++ {
		writeFile(t, filepath.Join(ws, "many", fmt.Sprintf("f%03d.txt", i)), "needle\n")
	}
	r = call(t, c, "search_files", `{"pattern":"needle","path":"many"}`)
	if r.Status != events.StatusOK || strings.Count(r.Output, ".txt") != 100 || r.Metadata["truncated"] != true {
		t.Fatalf("search_files under max_results 100: %d entries, %v", strings.Count(r.Output, ".txt"), r.Metadata)
	}
	big := filepath.Join(ws, "big.log")
	if err := os.WriteFile(big, make([]byte, 11<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	r = call(t, c, "read_file", `{"path":"big.log"}`)
	if r.Status == events.StatusOK || !strings.Contains(r.Output, "10485760") {
		t.Fatalf("read_file over max_size: %+v", r)
	}
	for i := 0; i < 2; i++ {
		m, err := violations.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("violation %d: %v", i, err)
		}
		var v events.ViolationData
		if _, err := events.DecodeData(m.Header, m.Data, &v); err != nil || v.Action != "deny" || v.Revision == "" {
			t.Fatalf("violation = %+v %v", v, err)
		}
	}

	// A new document takes effect without a restart.
	if err := os.WriteFile(polFile, []byte("tools:\n  default: ask\n  read_file:\n    action: deny\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new policy denying read", func() (bool, string) {
		r := call(t, c, "read", `{"path":"README.md"}`)
		return r.Status == events.StatusDenied, string(r.Status)
	})
	// An invalid document is refused; the one in force stays, and says so.
	if err := os.WriteFile(polFile, []byte("tools:\n  read_file:\n    action: perhaps\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a policy.rejected event", func() (bool, string) {
		m, err := changes.NextMsg(100 * time.Millisecond)
		if err != nil {
			return false, err.Error()
		}
		ev, _, _ := events.Decode(m.Header, m.Data)
		if ev.Type() != events.TypePolicyRejected {
			return false, ev.Type()
		}
		var d events.PolicyChangeData
		_ = json.Unmarshal(ev.Data(), &d)
		return len(d.Errors) > 0 && strings.Contains(strings.Join(d.Errors, " "), "line 3"), strings.Join(d.Errors, "; ")
	})
	if r := call(t, c, "read", `{"path":"README.md"}`); r.Status != events.StatusDenied {
		t.Fatalf("after an invalid document the previous policy must stay: %+v", r)
	}
}

func TestPolicyPushReachesTheFleet(t *testing.T) {
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "hello\n")
	p := startProcess(t, ws, nil)
	admin := trusttest.CredsFile(t, installUser(t, identity.RoleAdmin, "admin"))
	agent := trusttest.CredsFile(t, installUser(t, identity.RoleAgent, "agent-q"))
	c := p.client(t, "agent-q")
	if r := call(t, c, "read", `{"path":"README.md"}`); r.Status != events.StatusOK {
		t.Fatalf("default policy: %+v", r)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	_ = os.WriteFile(bad, []byte("tools: [1, 2]\n"), 0o644)
	if _, errOut, code := p.toolctl(t, "policy", "push", bad, "--creds", admin); code == toolctl.ExitOK || !strings.Contains(errOut, "not pushed") {
		t.Fatalf("pushing an invalid policy: code %d, %s", code, errOut)
	}
	good := filepath.Join(t.TempDir(), "policy.yaml")
	_ = os.WriteFile(good, []byte("tools:\n  default: allow\n  read:\n    action: deny\n"), 0o644)
	if _, errOut, code := p.toolctl(t, "policy", "push", good, "--creds", agent); code == toolctl.ExitOK || !strings.Contains(errOut, "admin") {
		t.Fatalf("pushing with an agent's credentials: code %d, %s", code, errOut)
	}
	out, errOut, code := p.toolctl(t, "policy", "push", good, "--creds", admin)
	if code != toolctl.ExitOK || !strings.Contains(out, "revision") {
		t.Fatalf("push: %d %s %s", code, out, errOut)
	}
	eventually(t, "the pushed policy", func() (bool, string) {
		r := call(t, c, "read", `{"path":"README.md"}`)
		return r.Status == events.StatusDenied, string(r.Status)
	})
	// check explains a decision without a bus.
	out, _, code = p.toolctl(t, "policy", "check", "--policy", good, "--workspace", ws, "--tool", "read_file", "--args", `{"path":"README.md"}`)
	var d map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil || d["action"] != "deny" {
		t.Fatalf("policy check: %d %s", code, out)
	}
}

// TestPolicyFileMidWriteKeepsTheLastGoodPolicy: the shell's > truncates
// the policy file before writing it, and a writer may write it in
// pieces. Neither the empty file nor the first piece (a valid document
// that happens to allow everything) is ever in force: the policy that
// denies read stays until the whole new document is there.
func TestPolicyFileMidWriteKeepsTheLastGoodPolicy(t *testing.T) {
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "hello\n")
	polFile := filepath.Join(stateTempDir(t), "policy.yaml")
	writeFile(t, polFile, "tools:\n  default: allow\n  read:\n    action: deny\n")
	p := startProcess(t, ws, func(o *daemon.Options) { o.PolicyFile = polFile })
	c := p.client(t, "agent-w")
	nc, _, err := identity.Dial(p.url, "", identity.RoleAdmin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	changes, _ := nc.SubscribeSync(events.PolicyChangeSubject)
	readDenied := func(when string) {
		t.Helper()
		if r := call(t, c, "read", `{"path":"README.md"}`); r.Status != events.StatusDenied {
			t.Fatalf("%s: read %s, want the policy in force to deny it", when, r.Status)
		}
	}
	readDenied("at start")

	// Truncated: the file stays empty until the worker has said what it
	// made of it.
	if err := os.WriteFile(polFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := changes.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("no word about the empty policy file: %v", err)
	}
	ev, _, _ := events.Decode(m.Header, m.Data)
	if ev.Type() != events.TypePolicyRejected || !strings.Contains(string(ev.Data()), "empty") {
		t.Fatalf("the empty policy file: %s %s, want it rejected as empty", ev.Type(), ev.Data())
	}
	readDenied("with the file empty")

	// Written in two pieces; the first alone would allow read.
	f, err := os.OpenFile(polFile, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("tools:\n  default: allow\n"); err != nil {
		t.Fatal(err)
	}
	readDenied("half written")
	time.Sleep(200 * time.Millisecond)
	readDenied("half written")
	if _, err := f.WriteString("  read:\n    action: deny\n  ls:\n    action: deny\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the whole new policy denying ls", func() (bool, string) {
		r := call(t, c, "ls", `{}`)
		return r.Status == events.StatusDenied, string(r.Status)
	})
	readDenied("after the write")
}
