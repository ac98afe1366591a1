package test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/toolctl"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestWorkerRefusesStateInTheWorkspace: a data directory, credentials
// file or state directory an agent could read through its tools stops
// the worker at start.
func TestWorkerRefusesStateInTheWorkspace(t *testing.T) {
	ws := newWorkspace(t)
	in, err := identity.LoadInstall()
	if err != nil {
		t.Fatal(err)
	}
	creds, _ := in.Mint(identity.RoleWorker, "worker")
	inside := filepath.Join(ws, "worker.creds")
	if err := os.WriteFile(inside, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]daemon.Options{
		"data":  {DataDir: filepath.Join(ws, ".toolgate")},
		"creds": {NATSURL: "nats://127.0.0.1:1", Creds: inside},
	} {
		t.Run(name, func(t *testing.T) {
			o.Workspace, o.Listen = ws, "127.0.0.1:0"
			o.Logger, o.Out = slog.New(slog.NewTextHandler(io.Discard, nil)), io.Discard
			err := daemon.Run(context.Background(), o)
			if !errors.Is(err, identity.ErrInWorkspace) {
				t.Fatalf("Run = %v, want ErrInWorkspace", err)
			}
		})
	}
	t.Run("state", func(t *testing.T) {
		t.Setenv(identity.EnvStateDir, filepath.Join(ws, "state"))
		err := daemon.Run(context.Background(), daemon.Options{Workspace: ws, Listen: "127.0.0.1:0",
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Out: io.Discard})
		if !errors.Is(err, identity.ErrInWorkspace) {
			t.Fatalf("Run = %v, want ErrInWorkspace", err)
		}
	})
	if ents, _ := os.ReadDir(ws); len(ents) != 1 {
		t.Fatalf("the worker wrote into the workspace: %v", ents)
	}
}

// TestWorkerRefusesTrustedFilesAnAgentReaches: the policy the gate
// judges by, the hooks, the tool overrides, the MCP servers' config and
// the MCP agent's credentials stop the worker at start when a served
// root reaches them: in the workspace, through a symbolic link the
// agent could re-point, or in a directory the policy's allowed_paths
// opens. Nothing starts, so no tool ever reads or writes them.
func TestWorkerRefusesTrustedFilesAnAgentReaches(t *testing.T) {
	ws := newWorkspace(t)
	outside := stateTempDir(t)
	extra := stateTempDir(t)
	policyOutside := filepath.Join(outside, "policy.yaml")
	writeFile(t, policyOutside, "tools:\n  default: ask\n")
	opensExtra := filepath.Join(outside, "opens-extra.yaml")
	writeFile(t, opensExtra, "tools:\n  default: ask\n  read:\n    allowed_paths: [\""+extra+"\"]\n")
	inExtra := filepath.Join(extra, "hooks.yaml")
	writeFile(t, inExtra, "redact: {}\n")
	trusted := filepath.Join(ws, "trusted")
	for _, f := range []string{"policy.yaml", "hooks.yaml", "tools.yaml", "mcp.json", "mcp.creds"} {
		writeFile(t, filepath.Join(trusted, f), "{}\n")
	}
	// An MCP server whose command is a script in the workspace: the
	// worker would run whatever the agent wrote there.
	writeFile(t, filepath.Join(ws, "server.sh"), "#!/bin/sh\n")
	if err := os.Chmod(filepath.Join(ws, "server.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	mcpScript := filepath.Join(outside, "mcp.json")
	writeFile(t, mcpScript, `{"mcpServers": {"local": {"command": "`+filepath.Join(ws, "server.sh")+`"}}}`)
	link := filepath.Join(ws, "policy-link.yaml")
	if err := os.Symlink(policyOutside, link); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		o    daemon.Options
		flag string
	}{
		"policy":                 {daemon.Options{PolicyFile: filepath.Join(trusted, "policy.yaml")}, "--policy"},
		"hooks":                  {daemon.Options{HooksFile: filepath.Join(trusted, "hooks.yaml")}, "--hooks"},
		"tools config":           {daemon.Options{ToolsConfig: filepath.Join(trusted, "tools.yaml")}, "--tools-config"},
		"mcp config":             {daemon.Options{MCPConfig: filepath.Join(trusted, "mcp.json")}, "--mcp-config"},
		"mcp creds":              {daemon.Options{MCPCreds: filepath.Join(trusted, "mcp.creds")}, "--mcp-creds"},
		"policy through link":    {daemon.Options{PolicyFile: link}, "symbolic link " + link},
		"mcp server command":     {daemon.Options{MCPConfig: mcpScript}, `the command of server "local"`},
		"hooks in an extra root": {daemon.Options{PolicyFile: opensExtra, HooksFile: inExtra}, "allowed_paths: --hooks"},
	} {
		t.Run(name, func(t *testing.T) {
			o := tc.o
			o.Workspace, o.Listen, o.DataDir = ws, "127.0.0.1:0", stateTempDir(t)
			o.Logger, o.Out = slog.New(slog.NewTextHandler(io.Discard, nil)), io.Discard
			// A worker that starts anyway stops when the context ends.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := daemon.Run(ctx, o)
			if !errors.Is(err, identity.ErrInWorkspace) || !strings.Contains(err.Error(), tc.flag) {
				t.Fatalf("Run = %v, want ErrInWorkspace naming %s", err, tc.flag)
			}
		})
	}
}

// TestEmbeddedServerIsAuthenticated: the quick start's server refuses a
// client without credentials, an old ./.toolgate is left alone with a
// message, and nothing is written into the workspace.
func TestEmbeddedServerIsAuthenticated(t *testing.T) {
	ws := newWorkspace(t)
	old := filepath.Join(ws, ".toolgate")
	writeFile(t, filepath.Join(old, "approver", "tokens"), "alice 0123456789abcdef0123\n")
	writeFile(t, filepath.Join(ws, "README.md"), "hi\n")
	p := startProcess(t, ws, nil)
	if !strings.Contains(p.out.String(), old+" is no longer used and was left alone") {
		t.Fatalf("no word about the old state directory:\n%s", p.out)
	}
	if _, err := nats.Connect(p.url); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("unauthenticated connect: %v, want an authorization violation", err)
	}
	out, errOut, code := p.toolctl(t, "call", "read", "path=README.md")
	if code != toolctl.ExitOK || !strings.Contains(out, "hi") {
		t.Fatalf("toolctl call: %d %s %s", code, out, errOut)
	}
	// Agent B's credentials cannot hear agent A's results.
	a := p.client(t, "agent-a")
	nb, _, err := identity.Dial(p.url, "", identity.RoleAgent, "agent-b")
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	spy, _ := nb.SubscribeSync(events.SubjectResults)
	if err := nb.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nb.LastError(); !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("agent-b subscribing to every result: %v, want a permissions violation", err)
	}
	if r := call(t, a, "read", `{"path":"README.md"}`); r.Status != events.StatusOK {
		t.Fatalf("agent-a read: %+v", r)
	}
	if m, err := spy.NextMsg(0); err == nil {
		t.Fatalf("agent-b heard %s", m.Subject)
	}
	if b, _ := os.ReadFile(filepath.Join(old, "approver", "tokens")); !strings.HasPrefix(string(b), "alice ") {
		t.Fatal("the old state directory was touched")
	}
	ents, _ := os.ReadDir(ws)
	if len(ents) != 2 {
		t.Fatalf("the workspace holds more than README.md and the old .toolgate: %v", ents)
	}
}

// TestSecondWorkerJoinsTheBus: a worker started on a store another
// worker's embedded server holds — as `worker` typed in a second
// terminal does, on the state directory's store — joins that server as
// another worker instead of starting a second bus over the same files;
// one given another address on that store refuses, naming the running
// server and how to join it.
func TestSecondWorkerJoinsTheBus(t *testing.T) {
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "hello\n")
	data := stateTempDir(t)
	first := startProcess(t, ws, func(o *daemon.Options) { o.DataDir = data; o.Name = "first" })
	mcpURL := make(chan string, 1)
	second := startProcess(t, ws, func(o *daemon.Options) {
		o.DataDir, o.Listen, o.Name = data, "", "second"
		o.MCPListen, o.MCPReady = "127.0.0.1:0", func(u string) { mcpURL <- u } // worker --mcp-listen ..., as typed
	})
	if second.url != first.url || !strings.Contains(second.out.String(), "joining it as another worker") {
		t.Fatalf("second worker on %s, first on %s:\n%s", second.url, first.url, second.out)
	}
	if u := testenv.Recv(t, mcpURL, "the MCP face's address"); !strings.HasSuffix(u, "/mcp") {
		t.Fatalf("the joined worker's MCP endpoint: %q", u)
	}
	if out, errOut, code := second.toolctl(t, "call", "read", "path=README.md"); code != toolctl.ExitOK || !strings.Contains(out, "hello") {
		t.Fatalf("a call with two workers: %d %s %s", code, out, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := daemon.Run(ctx, daemon.Options{Workspace: ws, DataDir: data, Listen: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Out: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "in use") || !strings.Contains(err.Error(), "--nats "+first.url) {
		t.Fatalf("a second server on the store: %v, want a refusal naming %s", err, first.url)
	}
}

// TestWorkerCleanRestartLogsNoWarnings: a worker stopped cleanly leaves its
// store so that the next start logs no recovery: no warning or error
// line from the embedded server over a stop and a restart.
func TestWorkerCleanRestartLogsNoWarnings(t *testing.T) {
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "hello\n")
	data := stateTempDir(t)
	var logs capture
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for i := range 2 {
		p := startProcess(t, ws, func(o *daemon.Options) { o.DataDir = data; o.Logger = logger })
		if out, errOut, code := p.toolctl(t, "call", "read", "path=README.md"); code != toolctl.ExitOK {
			t.Fatalf("run %d: %d %s %s", i, code, out, errOut)
		}
		if err := p.stop(); err != nil {
			t.Fatalf("run %d: stop: %v", i, err)
		}
	}
	var warned []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "component=nats-server") {
			warned = append(warned, l)
		}
	}
	if len(warned) > 0 {
		t.Fatalf("%d warning lines from the embedded server over a clean stop and restart:\n%s", len(warned), strings.Join(warned, "\n"))
	}
}
