package builtin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// The gate allows reading notes.txt; between its judgement and the open,
// the file becomes a link to a denied one. The open-time check must judge
// the file actually opened: trusting the path the gate allowed (the
// shortcut for a file opened at that very path) would read the key.
func TestFileSwappedAfterTheGateIsJudgedAgain(t *testing.T) {
	pol, _, err := policy.Parse([]byte("tools:\n  read_file:\n    action: allow\n    constraints:\n      denied_paths: [\"**/*.key\"]\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	swapped := false
	swap := tools.Middleware(func(next tools.Handler) tools.Handler {
		return tools.HandlerFunc(func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
			if c.Tool.Name == "read" && !swapped {
				swapped = true
				if err := os.Remove(filepath.Join(dir, "notes.txt")); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink("server.key", filepath.Join(dir, "notes.txt")); err != nil {
					t.Fatal(err)
				}
			}
			return next.Handle(ctx, c)
		})
	})
	e := newEnv(t, Config{Workspace: dir}, tools.WithGate(policy.NewGate(pol)), tools.WithHooks(nil, swap))
	e.write(t, "server.key", "PRIVATE KEY\n")
	e.write(t, "notes.txt", "notes\n")

	// Unswapped, the shortcut applies and the read works.
	swapped = true
	if out := e.ok(t, "read", map[string]any{"path": "notes.txt"}); !strings.Contains(out.Content, "notes") {
		t.Fatalf("read: %q", out.Content)
	}
	swapped = false
	out, err := e.call(t, "read", map[string]any{"path": "notes.txt"})
	if !errors.Is(err, tools.ErrDenied) {
		t.Fatalf("read of the swapped file: output %+v, err %v; want it denied", out, err)
	}
	if out != nil && strings.Contains(out.Content, "PRIVATE") {
		t.Fatalf("the key was read: %q", out.Content)
	}
}
