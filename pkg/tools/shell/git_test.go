package shell_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/tools/shell"
)

// TestGitRunsNoProgramFromWorkspaceConfig: HOME is the workspace, so an
// agent that may write files there could plant a .gitconfig (or a bare
// repository's config, or hooks) naming a program, and have an allowed
// read-only `git status` run it: core.fsmonitor, core.hooksPath and
// friends. Commands must run git with those neutralised.
func TestGitRunsNoProgramFromWorkspaceConfig(t *testing.T) {
	testenv.LookPath(t, "git", "git")
	forEachMode(t, func(t *testing.T, mode shell.Mode) {
		ws := newWorkspace(t, testUID)
		p := newPipeline(t, shell.Config{Workspace: ws, Sandbox: mode})
		ctx := context.Background()
		if out, err := run(ctx, t, p, map[string]any{"command": "git init -q . && echo x > f && git add f"}); err != nil || out.IsError {
			t.Fatalf("git init: %v %+v", err, out)
		}
		planted := filepath.Join(ws, "pwned")
		cfg := "[core]\n\tfsmonitor = \"touch " + planted + "; false\"\n\thooksPath = hooks\n[safe]\n\tbareRepository = all\n"
		// Both the global config (HOME is the workspace) and the repository's.
		for _, f := range []string{filepath.Join(ws, ".gitconfig"), filepath.Join(ws, ".git", "config")} {
			old, _ := os.ReadFile(f)
			if err := os.WriteFile(f, append(old, []byte(cfg)...), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Join(ws, "hooks"), 0o755); err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(filepath.Join(ws, "hooks", "pre-commit"), []byte("#!/bin/sh\ntouch "+planted+"\n"), 0o755)
		for _, cmd := range []string{"git status", "git diff", "git -c user.name=a -c user.email=a@b commit -qm m"} {
			out, err := run(ctx, t, p, map[string]any{"command": cmd})
			if err != nil {
				t.Fatalf("%s: %v", cmd, err)
			}
			if _, err := os.Stat(planted); err == nil {
				t.Fatalf("%s ran a program named in a workspace git config or hook: %s", cmd, out.Content)
			}
		}
	})
}
