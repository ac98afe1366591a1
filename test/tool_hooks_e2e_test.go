package test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/hooks"
	"github.com/toolgate/toolgate/pkg/trust/trusttest"
)

// hooksPolicy allows everything but *.pem files.
const hooksPolicy = `
tools:
  default: allow
  write:
    action: allow
    constraints:
      denied_paths: ["**/*.pem"]
`

// hooksFile is the fleet's hooks: a remote hook service (stamp) before
// writes and after reads, one that never answers before edits, one that
// is not running before ls (fail_open), in this order.
const hooksFile = `

before:
  - name: stamp
    subject: toolgate.hook.stamp
    timeout: 10s
    tools: [write]
  - name: silent
    subject: toolgate.hook.silent
    timeout: 300ms
    tools: [edit]
  - name: optional
    subject: toolgate.hook.optional
    fail_open: true
    tools: [ls]
after:
  - name: stamp
    subject: toolgate.hook.stamp
    tools: [read]
`

// secretFormats is a file holding a secret of every common format, built
// from parts so that no scanner mistakes this file for a leak, and the
// values that must not come back.
func secretFormats() (file string, values []string) {
	values = []string{
		"AKIA" + "IOSFODNN7EXAMPLE",
		"wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY",
		"ghp_" + strings.Repeat("a1B2c3D4e5", 4),
		"github_pat_" + "11ABCDEFG0" + strings.Repeat("x", 30),
		"xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
		"eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ" + ".eyJqdGkiOiJBQkNERUZHIiwiaWF0IjoxNzAwMDAwMDAwfQ.c2lnbmF0dXJl",
		"SA" + strings.Repeat("QRSTUVWXYZ234567ABCDEFGHIJKLMNOP", 2)[:56],
		"MIIEowIBAAKCAQEA1234567890abcdef",
		"sk_live_51HxYzAbCdEf",
		"abcDEF0123456789ghiJKL",
	}
	file = strings.Join([]string{
		"ordinary: the build passed",
		"aws_access_key_id = " + values[0],
		"aws_secret_access_key = " + values[1],
		"GITHUB_TOKEN=" + values[2],
		"pat: " + values[3],
		"SLACK_TOKEN=" + values[4],
		"jwt " + values[5],
		"account seed " + values[6],
		"-----BEGIN RSA " + "PRIVATE KEY-----\n" + values[7] + "\nQWERTYUIOPASDFGHJKLZXCVBNM0987\n-----END RSA " + "PRIVATE KEY-----",
		"api_key=" + values[8],
		"Authorization: Bearer " + values[9],
		"ordinary: the end",
	}, "\n") + "\n"
	return file, values
}

// busLog keeps every message on the bus.
type busLog struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func (b *busLog) add(m *nats.Msg) {
	b.mu.Lock()
	b.msgs = append(b.msgs, m)
	b.mu.Unlock()
}

func (b *busLog) all() []*nats.Msg {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*nats.Msg(nil), b.msgs...)
}

// TestToolHooksEndToEnd runs a worker with a hooks file on an
// authenticated server, a hook service answering over NATS with the hook
// role's credentials, and an agent: the hook changes a write (and a
// change into a denied path is denied, nothing written), a silent hook
// fails its calls closed (nothing runs, counted), a missing fail_open
// hook is passed over, an after hook changes a read's output, the audit
// records who changed what, and every result and progress message on the
// bus is free of the worker's own credentials and the secrets of a file
// the agent reads (read and bash).
func TestToolHooksEndToEnd(t *testing.T) {
	s := testenv.StartAuthNATS(t)
	workerCreds := s.Creds(t, identity.RoleWorker, "worker")
	workerSeed := seedOf(t, workerCreds.Path)

	ws := newWorkspace(t)
	secrets, values := secretFormats()
	credsText, err := os.ReadFile(workerCreds.Path)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ws, "secrets.txt"), secrets)
	// A copy of the worker's own credentials where the agent can read it.
	writeFile(t, filepath.Join(ws, "leak.creds"), string(credsText))
	writeFile(t, filepath.Join(ws, "config.txt"), "mode = safe\n")
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	writeFile(t, pol, hooksPolicy)
	hf := filepath.Join(dir, "hooks.yaml")
	writeFile(t, hf, hooksFile)

	// Everything on the bus, as an admin sees it.
	admin, _ := s.ConnectAs(t, identity.RoleAdmin, "admin")
	var bus busLog
	if _, err := admin.Subscribe("toolgate.>", bus.add); err != nil {
		t.Fatal(err)
	}
	audits := make(chan *nats.Msg, 64)
	if _, err := admin.ChanSubscribe("toolgate.audit.agent-h.write", audits); err != nil {
		t.Fatal(err)
	}
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}

	// The hook service, with the hook role's credentials.
	hookNC, _ := s.ConnectAs(t, identity.RoleHook, "stamp")
	sub, err := hooks.Serve(hookNC, events.HookSubject("stamp"), hooks.HandlerFunc(func(_ context.Context, req *events.HookRequest) (*events.HookResponse, error) {
		if req.Stage == events.HookAfter {
			out := req.Output + "-- checked by stamp\n"
			return &events.HookResponse{Action: events.HookModify, Output: &out}, nil
		}
		var args map[string]any
		if err := json.Unmarshal(req.Arguments, &args); err != nil {
			return nil, err
		}
		if args["content"] == "retarget" {
			args["path"] = "deploy.pem" // the policy denies it
		} else {
			args["content"] = "stamped by " + req.Agent + ": " + args["content"].(string)
		}
		b, _ := json.Marshal(args)
		return &events.HookResponse{Action: events.HookModify, Arguments: b}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	// The silent hook: it hears the requests and never answers.
	silentNC, _ := s.ConnectAs(t, identity.RoleHook, "silent")
	heard := make(chan struct{}, 8)
	if _, err := silentNC.Subscribe(events.HookSubject("silent"), func(*nats.Msg) { heard <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	for _, nc := range []*nats.Conn{hookNC, silentNC} {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}

	var out capture
	startProcess(t, ws, func(o *daemon.Options) {
		o.NATSURL, o.Creds, o.PolicyFile, o.HooksFile = s.ClientURL(), workerCreds.Path, pol, hf
		o.MetricsListen, o.Out = "127.0.0.1:0", &out
	})
	if !strings.Contains(out.String(), "tool hooks: redaction on; before: 3 (stamp, silent, optional); after: 1 (stamp)") {
		t.Fatalf("the banner does not say the hooks:\n%s", out.String())
	}
	agentNC, _ := s.ConnectAs(t, identity.RoleAgent, "agent-h")
	// The worker's results are signed by that server's install's worker.
	agent, err := client.New(agentNC, "agent-h", client.WithTrustedAccounts(workerCreds.Account))
	if err != nil {
		t.Fatal(err)
	}

	// A before hook changes a write: it runs with the changed arguments.
	r := call(t, agent, "write", `{"path":"notes.txt","content":"hello"}`)
	if r.Status != events.StatusOK {
		t.Fatalf("write: %+v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "notes.txt")); string(b) != "stamped by agent-h: hello" {
		t.Fatalf("notes.txt = %q", b)
	}
	if len(r.Hooks) != 1 || r.Hooks[0].Hook != "stamp" || r.Hooks[0].ArgsSHA256Before != worker.ArgsSHA256([]byte(`{"path":"notes.txt","content":"hello"}`)) ||
		r.Hooks[0].ArgsSHA256After == r.Hooks[0].ArgsSHA256Before {
		t.Fatalf("result hooks: %+v", r.Hooks)
	}
	writeID := r.CallID

	// A change into a path the policy denies is denied: nothing written.
	r = call(t, agent, "write", `{"path":"innocent.txt","content":"retarget"}`)
	if r.Status != events.StatusDenied || r.Decision == nil || !strings.Contains(r.Decision.Rule, "denied_paths") {
		t.Fatalf("retargeted write: %+v", r)
	}
	for _, f := range []string{"innocent.txt", "deploy.pem"} {
		if _, err := os.Stat(filepath.Join(ws, f)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s was written", f)
		}
	}

	// A silent hook fails closed: denied, naming it; the file unchanged.
	r = call(t, agent, "edit", `{"path":"config.txt","old_string":"safe","new_string":"unsafe"}`)
	if r.Status != events.StatusDenied || !strings.Contains(r.Output, "hook silent failed") || !strings.Contains(r.Output, "did not answer within 300ms") {
		t.Fatalf("edit: %+v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "config.txt")); string(b) != "mode = safe\n" {
		t.Fatalf("config.txt = %q", b)
	}
	select {
	case <-heard:
	case <-time.After(30 * time.Second):
		t.Fatal("the silent hook was never asked")
	}

	// A missing hook configured fail_open is passed over.
	r = call(t, agent, "ls", `{"path":"."}`)
	if r.Status != events.StatusOK || len(r.Hooks) != 1 || !strings.Contains(r.Hooks[0].Note, "fail_open") {
		t.Fatalf("ls: %+v", r)
	}

	// Reads and a command printing secrets: redacted, and the after hook
	// saw (and changed) only the redacted output.
	r = call(t, agent, "read", `{"path":"secrets.txt"}`)
	if r.Status != events.StatusOK || !strings.Contains(r.Output, "-- checked by stamp") || !strings.Contains(r.Output, "ordinary: the end") {
		t.Fatalf("read: %+v", r)
	}
	for _, kind := range []string{"aws-access-key-id", "aws-secret-access-key", "github-token", "slack-token", "jwt", "nats-seed", "private-key", "api-key", "bearer-token"} {
		if !strings.Contains(r.Output, hooks.Marker(kind)) {
			t.Errorf("read: no %s marker in\n%s", kind, r.Output)
		}
	}
	if len(r.Hooks) != 2 || r.Hooks[0].Hook != hooks.RedactName || r.Hooks[1].Hook != "stamp" {
		t.Fatalf("read hooks: %+v", r.Hooks)
	}
	r = call(t, agent, "read", `{"path":"leak.creds"}`)
	if r.Status != events.StatusOK || !strings.Contains(r.Output, hooks.Marker("worker-credential")) {
		t.Fatalf("read of the worker's credentials: %+v", r)
	}
	var progress []string
	var pmu sync.Mutex
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	br, err := agent.Call(ctx, "bash", map[string]any{"command": "cat secrets.txt leak.creds; echo done"},
		client.OnProgress(func(p events.ProgressData) { pmu.Lock(); progress = append(progress, p.Chunk); pmu.Unlock() }))
	if err != nil || br.Status != events.StatusOK || !strings.Contains(br.Output, "done") {
		t.Fatalf("bash: %+v %v", br, err)
	}

	// The audit record says which hook changed the write, and how.
	audited := waitAudit(t, audits, writeID)
	if len(audited.Hooks) != 1 || audited.Hooks[0].Hook != "stamp" || audited.Hooks[0].ArgsSHA256After == "" ||
		audited.ArgsSHA256 != worker.ArgsSHA256([]byte(`{"path":"notes.txt","content":"hello"}`)) {
		t.Fatalf("audit: %+v", audited)
	}

	// Counted: the silent hook's failure is in the worker's metrics.
	if m := regexp.MustCompile(`metrics, health and readiness on (http://\S+) `).FindStringSubmatch(out.String()); m != nil {
		resp, err := http.Get(m[1] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !regexp.MustCompile(`toolgate_hook_failures_total\{[^}]*toolgate_hook="silent"[^}]*\} 1\b`).Match(body) {
			t.Fatalf("no count of the silent hook's failure in /metrics:\n%s", grepLines(string(body), "hook"))
		}
	} else {
		t.Fatalf("the worker did not say where its metrics are:\n%s", out.String())
	}

	// Nothing on the bus carries a secret: results, progress, audit.
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}
	var sawResult, sawProgress, sawViolation bool
	for _, m := range bus.all() {
		if m.Subject == events.ViolationSubject("agent-h") {
			var v events.ViolationData
			if _, err := events.DecodeData(m.Header, m.Data, &v); err == nil && v.Rule == "hook.silent" && v.Tool == "edit" {
				sawViolation = true
			}
		}
		sawResult = sawResult || strings.HasPrefix(m.Subject, "toolgate.result.agent-h.")
		sawProgress = sawProgress || strings.HasPrefix(m.Subject, "toolgate.progress.agent-h.")
		for _, secret := range append([]string{workerSeed, workerCreds.JWT}, values...) {
			if strings.Contains(string(m.Data), secret) {
				t.Errorf("%s carries a secret (%.8s...)", m.Subject, secret)
			}
		}
	}
	pmu.Lock()
	defer pmu.Unlock()
	if !sawViolation {
		t.Error("no policy violation event for the call the silent hook failed closed")
	}
	if !sawResult || !sawProgress || len(progress) == 0 {
		t.Fatalf("the bus traffic was not seen: results %v, progress %v (%d chunks)", sawResult, sawProgress, len(progress))
	}
}

// waitAudit waits for the execution audit event of call id on ch.
func waitAudit(t *testing.T, ch <-chan *nats.Msg, id string) events.AuditData {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m := <-ch:
			var a events.AuditData
			if _, err := events.DecodeData(m.Header, m.Data, &a); err == nil && a.CallID == id && a.Kind == events.AuditExecution {
				return a
			}
		case <-timeout:
			t.Fatalf("no audit event for %s", id)
		}
	}
}

func grepLines(s, word string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestToolHookInNode: a hook service in JavaScript
// (examples/remote-tool-node/no-force-push-hook.mjs), its own process
// with the hook role's credentials, denies a bash call before it runs and
// passes the others.
func TestToolHookInNode(t *testing.T) {
	node := testenv.LookPath(t, "node", "nodejs")
	nodeDir, _ := filepath.Abs("../examples/remote-tool-node")
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "@nats-io")); err != nil {
		testenv.Missing(t, "run `npm ci` in examples/remote-tool-node")
	}
	ws := newWorkspace(t)
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	writeFile(t, pol, "tools:\n  default: allow\n")
	hf := filepath.Join(dir, "hooks.yaml")
	writeFile(t, hf, "before:\n  - name: no_force_push\n    subject: toolgate.hook.no_force_push\n    tools: [bash]\n")
	w := startProcess(t, ws, func(o *daemon.Options) { o.PolicyFile, o.HooksFile = pol, hf })
	cmd := exec.Command(node, "no-force-push-hook.mjs", w.url)
	cmd.Dir = nodeDir
	cmd.Env = append(os.Environ(), "NATS_CREDS="+installCredsFile(t, identity.RoleHook, "no_force_push"))
	startServing(t, cmd)

	c := w.client(t, "agent-n")
	r := call(t, c, "bash", `{"command":"touch pushed && git push --force origin main"}`)
	if r.Status != events.StatusDenied || r.Decision == nil || r.Decision.Rule != "hook.no_force_push" ||
		!strings.Contains(r.Output, "denied by hook no_force_push: force pushes need a ticket (asked by agent-n)") {
		t.Fatalf("force push: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(ws, "pushed")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the denied command ran")
	}
	r = call(t, c, "bash", `{"command":"echo fine > ok.txt && cat ok.txt"}`)
	if r.Status != events.StatusOK || !strings.Contains(r.Output, "fine") {
		t.Fatalf("echo: %+v", r)
	}
}

// TestHookChangedCallIsApprovedAsChanged: a call a before hook changed
// and the policy asks about is parked with the changed arguments, so
// people approve what will run; approved, it runs them. A hook that
// changes the arguments again when the approved call resumes gets it
// denied: people approved other arguments.
func TestHookChangedCallIsApprovedAsChanged(t *testing.T) {
	ws := newWorkspace(t)
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	writeFile(t, pol, askWrites)
	hf := filepath.Join(dir, "hooks.yaml")
	writeFile(t, hf, "before:\n  - name: stamp\n    subject: toolgate.hook.stamp\n    tools: [write]\n")
	installAccount(t)
	w := startProcess(t, ws, func(o *daemon.Options) { o.PolicyFile, o.HooksFile = pol, hf })
	creds := installUser(t, identity.RoleApprover, "approver")
	s := &approvalStack{worker: w, url: startApprover(t, w.url, func(o *approver.Options) { o.Creds = trusttest.CredsFile(t, creds) })}

	hnc := dialAs(t, w.url, identity.RoleHook, "stamp")
	sub, err := hooks.Serve(hnc, events.HookSubject("stamp"), hooks.HandlerFunc(func(_ context.Context, req *events.HookRequest) (*events.HookResponse, error) {
		var args map[string]string
		if err := json.Unmarshal(req.Arguments, &args); err != nil {
			return nil, err
		}
		switch {
		case strings.HasPrefix(args["content"], "again:"):
			args["content"] = "again:" + args["content"] // changes it every time
		case !strings.HasPrefix(args["content"], "stamped: "):
			args["content"] = "stamped: " + args["content"] // once
		}
		b, _ := json.Marshal(args)
		return &events.HookResponse{Action: events.HookModify, Arguments: b}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := hnc.Flush(); err != nil {
		t.Fatal(err)
	}
	c := w.client(t, "agent-p")

	final := s.submit(t, c, "hooked-1", "a.txt", "hello")
	var shown struct {
		Arguments json.RawMessage `json:"arguments"`
	}
	if code := s.api(t, "GET", "/api/approvals/hooked-1", "", &shown); code != http.StatusOK || !strings.Contains(string(shown.Arguments), "stamped: hello") {
		t.Fatalf("people are shown %d %s, want the changed arguments", code, shown.Arguments)
	}
	if code := s.api(t, "POST", "/api/approvals/hooked-1/approve", `{}`, nil); code != http.StatusOK {
		t.Fatalf("approve = %d", code)
	}
	if r := wait(t, final); r.Status != events.StatusOK {
		t.Fatalf("approved: %+v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "stamped: hello" {
		t.Fatalf("a.txt = %q", b)
	}

	final = s.submit(t, c, "hooked-2", "b.txt", "again:x")
	if code := s.api(t, "POST", "/api/approvals/hooked-2/approve", `{}`, nil); code != http.StatusOK {
		t.Fatalf("approve = %d", code)
	}
	r := wait(t, final)
	if r.Status != events.StatusDenied || !strings.Contains(r.Output, "hook stamp changed the arguments of a call people approved") {
		t.Fatalf("re-changed after approval: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(ws, "b.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("b.txt was written with arguments nobody approved")
	}
}
