// Package teststack starts the parts of an install that the end-to-end
// tests drive, the way a user runs them: a worker on its embedded NATS
// server, an approver service, and agents' calls that a policy parks for a
// person. The tests of the main module (test) and of the browser module
// (test/browser) share it; only tests import it.
package teststack

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/trust"
	"github.com/toolgate/toolgate/pkg/trust/trusttest"
)

// AskWrites is a policy under which writing a file needs a person.
const AskWrites = `tools:
  default: allow
  write_file:
    action: ask
`

// EditPolicy asks before shell commands, allows ls and denies touch.
const EditPolicy = `tools:
  default: allow
  run_shell:
    action: ask
    whitelist: ["ls", "ls *"]
    blacklist: ["touch *"]
`

// AliceToken is the login token of alice, the person every approver
// service started by StartApprover knows.
const AliceToken = "alice-e2e-token-0123456789"

// Worker is a running worker, as `go run ./cmd/worker` starts it.
type Worker struct {
	URL       string        // the NATS server's client URL
	Workspace string        // the directory its tools work in
	Out       *bytes.Buffer // what it printed
	stop      func() error
}

// StartWorker runs a worker on workspace ws (starting its embedded NATS
// server unless mod sets one) until the test ends. mod, when set, adjusts
// its options.
func StartWorker(t testing.TB, ws string, mod func(*daemon.Options)) *Worker {
	t.Helper()
	ready := make(chan string, 1)
	out := &bytes.Buffer{}
	o := daemon.Options{
		Listen: "127.0.0.1:0", DataDir: t.TempDir(), Workspace: ws,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Out: out,
		Ready: func(url string) { ready <- url },
	}
	if mod != nil {
		mod(&o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Run(ctx, o) }()
	w := &Worker{Workspace: ws, Out: out}
	select {
	case w.URL = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("worker exited at start: %v\n%s", err, out)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("worker did not become ready")
	}
	stopped := false
	w.stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return testenv.Recv(t, done, "done")
	}
	t.Cleanup(func() { _ = w.Stop() })
	return w
}

// Stop stops the worker and returns what its run returned; later calls
// return nil.
func (w *Worker) Stop() error { return w.stop() }

// Client connects to the NATS server at natsURL as agent, with the
// credentials of the tests' install, until the test ends.
func Client(t testing.TB, natsURL, agent string) *client.Client {
	t.Helper()
	nc, creds, err := identity.Dial(natsURL, "", identity.RoleAgent, agent)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var opts []client.Option
	if creds != nil {
		opts = append(opts, client.WithTrustedAccounts(creds.Services))
	}
	c, err := client.New(nc, agent, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// StartApprover runs an approver service on the NATS server at natsURL,
// with AliceToken as alice's login token, until the test ends, and returns
// its base URL. mod, when set, adjusts its options.
func StartApprover(t testing.TB, natsURL string, mod func(*approver.Options)) string {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	WriteFile(t, tokens, "alice "+AliceToken+"\n")
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
		if err := testenv.Recv(t, done, "done"); err != nil {
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

// ApprovalStack is a worker and an approver service on the same bus, as a
// user runs them.
type ApprovalStack struct {
	Worker *Worker
	URL    string // the approver's HTTP base URL
	// Approver is the approver's credentials, issued by the tests'
	// install.
	Approver trust.Signer
	// Policy is the policy file the worker follows (a change is hot
	// reloaded).
	Policy string
}

// StartApprovalStack starts a worker following policyDoc, trusting the
// approvers of its install (the default), and an approver service holding
// that install's approver credentials, as an install sets them up.
func StartApprovalStack(t testing.TB, policyDoc string) *ApprovalStack {
	t.Helper()
	ws := NewWorkspace(t)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	WriteFile(t, pol, policyDoc)
	w := StartWorker(t, ws, func(o *daemon.Options) { o.PolicyFile = pol })
	in, err := identity.LoadInstall()
	if err != nil {
		t.Fatal(err)
	}
	c, err := in.MintCreds(identity.RoleApprover, "approver")
	if err != nil {
		t.Fatal(err)
	}
	creds := trust.SignerOf(c)
	url := StartApprover(t, w.URL, func(o *approver.Options) { o.Creds = trusttest.CredsFile(t, creds) })
	return &ApprovalStack{Worker: w, URL: url, Approver: creds, Policy: pol}
}

// SubmitWrite makes agent c write content to path as call id and waits
// until the call is parked, returning where its final result arrives.
func SubmitWrite(t testing.TB, c *client.Client, id, path, content string) <-chan *events.ResultData {
	t.Helper()
	return submitParked(t, c, id, "write", map[string]any{"path": path, "content": content}, true)
}

// SubmitBash makes agent c run command as call id and waits until the call
// is parked, returning where its final result arrives.
func SubmitBash(t testing.TB, c *client.Client, id, command string) <-chan *events.ResultData {
	t.Helper()
	return submitParked(t, c, id, "bash", map[string]any{"command": command}, false)
}

// submitParked calls tool with args as id and waits for its pending
// result; reportErr makes a failed call an error of the test.
func submitParked(t testing.TB, c *client.Client, id, tool string, args map[string]any, reportErr bool) <-chan *events.ResultData {
	t.Helper()
	pending := make(chan events.ResultData, 1)
	final := make(chan *events.ResultData, 1)
	// The call's wait ends with the test: cancelled by a cleanup (which
	// runs before the worker's stops) and waited for, so that it never
	// reports after the test has completed.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	stopped := make(chan struct{})
	t.Cleanup(func() { cancel(); <-stopped })
	go func() {
		defer close(stopped)
		res, err := c.Call(ctx, tool, args, client.WithID(id),
			client.OnPending(func(r events.ResultData) { pending <- r }))
		if err != nil && reportErr && !errors.Is(ctx.Err(), context.Canceled) {
			t.Errorf("call %s: %v", id, err)
		}
		final <- res
	}()
	select {
	case r := <-pending:
		if r.Status != events.StatusPending {
			t.Fatalf("call %s: pending result status %s", id, r.Status)
		}
	case r := <-final:
		t.Fatalf("call %s finished without parking: %+v", id, r)
	case <-time.After(60 * time.Second):
		t.Fatalf("call %s: no pending result", id)
	}
	return final
}

// Wait returns the final result sent on ch, failing the test if none
// comes or it is nil.
func Wait(t testing.TB, ch <-chan *events.ResultData) *events.ResultData {
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

// WriteFile writes content to path, making its directory.
func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// NewWorkspace is a workspace the unprivileged user bash commands run as
// (when the tests run as root) can enter: t.TempDir and its parent are
// private to the test's user.
func NewWorkspace(t testing.TB) string {
	t.Helper()
	ws := t.TempDir()
	for _, d := range []string{filepath.Dir(ws), ws} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}
