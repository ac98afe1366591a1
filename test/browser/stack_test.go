package browser

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// askWrites is a policy under which writing a file needs a person.
const askWrites = `tools:
  default: allow
  write_file:
    action: ask
`

const aliceToken = "alice-browser-token-0123456789"

// process is a running worker, as `go run ./cmd/worker` starts it.
type process struct {
	url string
	ws  string
}

// approvalStack is a worker with a policy that asks before writes and an
// approver service on the same bus, as a user runs them.
type approvalStack struct {
	worker *process
	url    string // approver HTTP base URL
}

// startApprovalStack starts a worker following askWrites, trusting the
// approvers of its install, and an approver service holding that
// install's approver credentials.
func startApprovalStack(t *testing.T) *approvalStack {
	t.Helper()
	return startApprovalStackWith(t, askWrites)
}

// startApprovalStackWith is startApprovalStack with the policy policyDoc.
func startApprovalStackWith(t *testing.T, policyDoc string) *approvalStack {
	t.Helper()
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, policyDoc)
	w := startProcess(t, newWorkspace(t), func(o *daemon.Options) { o.PolicyFile = pol })
	in, err := identity.LoadInstall()
	if err != nil {
		t.Fatal(err)
	}
	creds, err := in.Mint(identity.RoleApprover, "approver")
	if err != nil {
		t.Fatal(err)
	}
	credsFile := filepath.Join(t.TempDir(), "approver.creds")
	if err := os.WriteFile(credsFile, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	url := startApprover(t, w.url, func(o *approver.Options) { o.Creds = credsFile })
	return &approvalStack{worker: w, url: url}
}

// startProcess runs a worker on an embedded server until the test ends.
func startProcess(t *testing.T, ws string, mod func(*daemon.Options)) *process {
	t.Helper()
	ready := make(chan string, 1)
	o := daemon.Options{
		Listen: "127.0.0.1:0", DataDir: t.TempDir(), Workspace: ws,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Out: io.Discard,
		Ready: func(url string) { ready <- url },
	}
	if mod != nil {
		mod(&o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Run(ctx, o) }()
	p := &process{ws: ws}
	select {
	case p.url = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("worker exited at start: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("worker did not become ready")
	}
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return p
}

// startApprover runs an approver service on the NATS server at natsURL,
// with a login token for alice, until the test ends, and returns its base
// URL. mod, when set, adjusts its options.
func startApprover(t *testing.T, natsURL string, mod func(*approver.Options)) string {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	writeFile(t, tokens, "alice "+aliceToken+"\n")
	ready := make(chan string, 1)
	o := approver.Options{NATSURL: natsURL, Listen: "127.0.0.1:0", TokenFile: tokens,
		DataDir: filepath.Join(dir, "data"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Out: io.Discard,
		Ready: func(addr string) { ready <- addr }}
	if mod != nil {
		mod(&o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- approver.Serve(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("approver: %v", err)
		}
	})
	select {
	case addr := <-ready:
		return "http://" + addr
	case err := <-done:
		t.Fatalf("approver exited at start: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("approver did not start")
	}
	return ""
}

func (p *process) client(t *testing.T, agent string) *client.Client {
	t.Helper()
	nc, _, err := identity.Dial(p.url, "", identity.RoleAgent, agent)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc, agent)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// submit publishes a write call and waits for its pending result; the
// channel it returns gets the final one.
func (s *approvalStack) submit(t *testing.T, c *client.Client, id, path, content string) <-chan *events.ResultData {
	t.Helper()
	pending := make(chan events.ResultData, 1)
	final := make(chan *events.ResultData, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		res, err := c.Call(ctx, "write", map[string]any{"path": path, "content": content}, client.WithID(id),
			client.OnPending(func(r events.ResultData) { pending <- r }))
		if err != nil {
			t.Errorf("call %s: %v", id, err)
		}
		final <- res
	}()
	select {
	case r := <-pending:
		if r.Status != events.StatusPending {
			t.Fatalf("pending result status %s", r.Status)
		}
	case r := <-final:
		t.Fatalf("call %s finished without parking: %+v", id, r)
	case <-time.After(60 * time.Second):
		t.Fatalf("call %s: no pending result", id)
	}
	return final
}

// wait returns the final result sent on ch.
func wait(t *testing.T, ch <-chan *events.ResultData) *events.ResultData {
	t.Helper()
	select {
	case r := <-ch:
		if r == nil {
			t.Fatal("no result")
		}
		return r
	case <-time.After(90 * time.Second):
		t.Fatal("no final result")
	}
	return nil
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// newWorkspace is a workspace the unprivileged user bash commands run as
// (when the tests run as root) can enter.
func newWorkspace(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	for _, d := range []string{filepath.Dir(ws), ws} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}
