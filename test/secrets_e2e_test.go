package test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/toolctl"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// capture collects everything toolgate says: log lines, banners, command
// output, and every message on the bus.
type capture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *capture) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

func (c *capture) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(c, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// record writes every message of nc's subscription to subject into c.
func (c *capture) record(t *testing.T, nc *nats.Conn, subject string) {
	t.Helper()
	if _, err := nc.Subscribe(subject, func(m *nats.Msg) {
		fmt.Fprintf(c, "msg %s %v %s\n", m.Subject, m.Header, m.Data)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// nkeySeed matches any nkey seed (operator, account, user).
var nkeySeed = regexp.MustCompile(`S[OAUNC][A-Z2-7]{56}`)

// assertNoSecret fails when any secret, or anything shaped like an nkey
// seed, appears in what was captured.
func assertNoSecret(t *testing.T, captured string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(captured, s) {
			i := strings.Index(captured, s)
			t.Errorf("secret %.6s... appears in the logs or events: ...%s...", s, captured[max(0, i-120):i])
		}
	}
	if m := nkeySeed.FindString(captured); m != "" {
		t.Errorf("an nkey seed %.4s... appears in the logs or events", m)
	}
}

// seedsIn returns the content of every nkey seed file under dir.
func seedsIn(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".nk") {
			b, _ := os.ReadFile(p)
			out = append(out, strings.TrimSpace(string(b)))
		}
		return nil
	})
	if len(out) == 0 {
		t.Fatalf("no seed files under %s", dir)
	}
	return out
}

// TestNoSecretInLogsOrEvents runs the end-to-end scenarios (quick start,
// denied calls, a parked write approved and one rejected through the
// approver with a login token, toolctl's commands) on the authenticated
// default, and a worker on a password-protected server, capturing every
// log line, banner, command output and bus message; none of the keys,
// tokens or passwords used may appear.
func TestNoSecretInLogsOrEvents(t *testing.T) {
	var seen capture

	// The authenticated default: worker, approver, agents, toolctl.
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "# hello\n")
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, askWrites)
	w := startProcess(t, ws, func(o *daemon.Options) { o.PolicyFile = pol; o.Logger = seen.logger(); o.Out = &seen })
	admin, _, err := identity.Dial(w.url, "", identity.RoleAdmin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	seen.record(t, admin, "toolgate.>")
	seen.record(t, admin, "$JS.EVENT.>")

	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	writeFile(t, tokens, "alice "+aliceToken+"\n")
	ready := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- approver.Serve(ctx, approver.Options{NATSURL: w.url, Listen: "127.0.0.1:0", TokenFile: tokens,
			DataDir: filepath.Join(dir, "data"), Logger: seen.logger(), Out: &seen, Ready: func(a string) { ready <- a }})
	}()
	defer func() { cancel(); testenv.Recv(t, done, "done") }()
	var s *approvalStack
	select {
	case a := <-ready:
		s = &approvalStack{worker: w, url: "http://" + a}
	case err := <-done:
		t.Fatalf("approver: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("approver did not start")
	}

	c := w.client(t, "agent-s")
	if r := call(t, c, "read", `{"path":"README.md"}`); r.Status != events.StatusOK {
		t.Fatalf("read: %+v", r)
	}
	if r := call(t, c, "read", `{"path":"../../etc/passwd"}`); r.Status == events.StatusOK {
		t.Fatalf("read outside: %+v", r)
	}
	final := s.submit(t, c, "s-approve", "ok.txt", "fine\n")
	if code := s.api(t, "POST", "/api/approvals/s-approve/approve", `{}`, nil); code != http.StatusOK {
		t.Fatalf("approve = %d", code)
	}
	wait(t, final)
	final = s.submit(t, c, "s-reject", "no.txt", "no\n")
	if code := s.api(t, "POST", "/api/approvals/s-reject/reject", `{"reason":"no"}`, nil); code != http.StatusOK {
		t.Fatalf("reject = %d", code)
	}
	wait(t, final)
	// A wrong token is refused without echoing it.
	req, _ := http.NewRequest("GET", s.url+"/api/approvals", nil)
	req.Header.Set("Authorization", "Bearer not-"+aliceToken)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		seen.Write(b)
	}
	for _, args := range [][]string{{"call", "read", "path=README.md"}, {"tools"}, {"events"}, {"approvals", "list"},
		{"policy", "amendments", "list"}} {
		o, e, _ := w.toolctl(t, args...)
		fmt.Fprintf(&seen, "toolctl %v\n%s\n%s\n", args, o, e)
	}
	// Credentials given on the command line that do not fit.
	agentCreds := filepath.Join(t.TempDir(), "a.creds")
	_, e, code := w.toolctl(t, "creds", "agent", "agent-s", "--out", agentCreds)
	fmt.Fprintln(&seen, e)
	if code != toolctl.ExitOK {
		t.Fatalf("toolctl creds: %d %s", code, e)
	}
	o, e, _ := w.toolctl(t, "--creds", agentCreds, "policy", "amendments", "list")
	fmt.Fprintf(&seen, "%s\n%s\n", o, e)
	agentSeed := seedOf(t, agentCreds)

	// A worker on a password-protected server, and clients with the
	// password in their URL, right and wrong.
	const password = "pw-0ae1f5c0d7b24a5e"
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		Username: "worker", Password: password, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("password server not ready")
	}
	pwURL := strings.Replace(ns.ClientURL(), "nats://", "nats://worker:"+password+"@", 1)
	pw := startProcess(t, newWorkspace(t), func(o *daemon.Options) {
		o.NATSURL = pwURL
		o.Logger = seen.logger()
		o.Out = &seen
	})
	o, e, _ = pw.toolctl(t, "call", "read", "path=nothing.txt")
	fmt.Fprintf(&seen, "%s\n%s\n", o, e)
	badURL := strings.Replace(pwURL, password, password+"x", 1)
	if err := daemon.Run(context.Background(), daemon.Options{NATSURL: badURL, Workspace: newWorkspace(t), Logger: seen.logger(), Out: &seen}); err == nil {
		t.Fatal("a worker with a wrong password started")
	} else {
		fmt.Fprintln(&seen, err)
	}
	var eo, ee bytes.Buffer
	toolctl.Run(context.Background(), []string{"--nats", badURL, "call", "read", "path=x"}, &eo, &ee)
	fmt.Fprintf(&seen, "%s\n%s\n", eo.String(), ee.String())
	if nc, err := nats.Connect(pwURL); err == nil {
		cl, _ := client.New(nc, "pw-agent")
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		if _, err := cl.Result(cctx, "missing"); err != nil {
			fmt.Fprintln(&seen, err)
		}
		ccancel()
		nc.Close()
	}
	_ = pw.stop()
	_ = w.stop()

	out := seen.String()
	if !strings.Contains(out, "worker:***@127.0.0.1") {
		t.Errorf("the password URL is not shown redacted:\n%s", out)
	}
	if !strings.Contains(out, "toolgate.result.agent-s.s-approve") {
		t.Fatalf("the bus traffic was not captured")
	}
	state := os.Getenv(identity.EnvStateDir)
	// The approver signs with credentials minted from the install (no
	// approver.nk of its own): the install's seeds are every key there is.
	secrets := seedsIn(t, state)
	secrets = append(secrets, aliceToken, password, agentSeed)
	assertNoSecret(t, out, secrets...)
}

func seedOf(t *testing.T, credsFile string) string {
	t.Helper()
	c, err := identity.LoadCreds(credsFile)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := c.Key.Seed()
	if err != nil {
		t.Fatal(err)
	}
	return string(seed)
}
