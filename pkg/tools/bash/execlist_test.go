package bash_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// TestExecuteAllowlist: where Landlock is available, a call the gate
// allowed executes only the programs the gate resolved for it. A gate
// talked around (here, one that allows a command running touch while it
// resolved only ls) does not get touch run: the marker never appears.
// With touch among the programs, it runs.
func TestExecuteAllowlist(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	if _, _, errno := syscall.Syscall(444, 0, 0, 1); errno != 0 { // landlock_create_ruleset: the ABI version
		testenv.Missing(t, "the kernel has no Landlock: the execute allowlist cannot be enforced")
	}
	ls, _ := exec.LookPath("ls")
	touch, _ := exec.LookPath("touch")
	real := func(p string) string {
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ws := newWorkspace(t, testUID)
	cfg := bash.Config{Workspace: ws, Sandbox: bash.ModeRequire}
	for _, tt := range []struct {
		name     string
		programs []string
		want     bool // the marker appears
	}{
		{"outside the allowlist", []string{real(ls)}, false},
		{"inside the allowlist", []string{real(ls), real(touch)}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			marker := filepath.Join(ws, "marker")
			_ = os.Remove(marker)
			gate := policy.EvaluatorFunc(func(context.Context, policy.Request) policy.Decision {
				return policy.Decision{Action: policy.Allow, Rule: "test", Rendered: true,
					Command: "ls >/dev/null; touch marker", Programs: tt.programs}
			})
			tool, err := bash.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			reg := tools.NewRegistry()
			if err := reg.Register(tool); err != nil {
				t.Fatal(err)
			}
			p := tools.NewPipeline(reg, tools.WithWorkspace(ws), tools.WithGate(gate))
			out, err := run(context.Background(), t, p, map[string]any{"command": "ls"})
			if err != nil {
				t.Fatal(err)
			}
			_, statErr := os.Stat(marker)
			if got := statErr == nil; got != tt.want {
				t.Fatalf("marker exists: %v, want %v\n%s", got, tt.want, out.Content)
			}
			if !tt.want && !strings.Contains(out.Content, "Permission denied") {
				t.Fatalf("touch was not refused with EACCES:\n%s", out.Content)
			}
		})
	}
}

// BenchmarkExecuteAllowlist is a sandboxed call of `ls` through a gate
// that resolved ls, with the allowlist (the programs given) and without
// (no programs: not restricted).
func BenchmarkExecuteAllowlist(b *testing.B) {
	testenv.LookPath(b, "bwrap", "bubblewrap")
	ls, _ := exec.LookPath("ls")
	lsReal, _ := filepath.EvalSymlinks(ls)
	ws := newWorkspace(b, testUID)
	tool, err := bash.New(bash.Config{Workspace: ws, Sandbox: bash.ModeRequire})
	if err != nil {
		b.Fatal(err)
	}
	reg := tools.NewRegistry()
	if err := reg.Register(tool); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name     string
		programs []string
	}{{"without", nil}, {"with", []string{lsReal}}} {
		b.Run(bc.name, func(b *testing.B) {
			gate := policy.EvaluatorFunc(func(context.Context, policy.Request) policy.Decision {
				return policy.Decision{Action: policy.Allow, Rule: "bench", Rendered: true, Command: "ls", Programs: bc.programs}
			})
			p := tools.NewPipeline(reg, tools.WithWorkspace(ws), tools.WithGate(gate))
			for b.Loop() {
				out, err := p.Handle(context.Background(), &tools.Call{Name: "bash", Arguments: []byte(`{"command":"ls"}`)})
				if err != nil || out.IsError {
					b.Fatal(err, out)
				}
			}
		})
	}
}
