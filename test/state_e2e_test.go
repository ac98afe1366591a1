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

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
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
