//go:build linux

package bash_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// testBinary is this test binary's real path (what setupInit falls back
// to).
func testBinary(t testing.TB) string {
	t.Helper()
	self, err := os.Executable()
	if err == nil {
		self, err = filepath.EvalSymlinks(self)
	}
	if err != nil {
		t.Fatal(err)
	}
	return self
}

// sandboxInits are the two programs a sandbox may start a restricted
// call with: toolgate-sandbox-init built from cmd/ (what an installed
// worker finds beside itself) and, without it, this test binary under
// that name. Each runs fn once, with the path setupInit must choose.
func sandboxInits(t testing.TB, fn func(t testing.TB, wantInit string)) {
	t.Helper()
	small := buildSandboxInit(t)
	self := testBinary(t)
	for _, c := range []struct{ name, path, want string }{
		{"small", small, small},
		{"self", filepath.Join(t.TempDir(), "none"), self},
	} {
		old := bash.SetSandboxInit(c.path)
		switch tb := t.(type) {
		case *testing.T:
			tb.Run(c.name, func(t *testing.T) { fn(t, c.want) })
		case *testing.B:
			tb.Run(c.name, func(b *testing.B) { fn(b, c.want) })
		}
		bash.SetSandboxInit(old)
	}
}

// builtSandboxInit is cmd/toolgate-sandbox-init built once per test
// binary, in a directory of testenv.Main's (removed when the tests end).
var builtSandboxInit = sync.OnceValues(func() (string, error) {
	gotool, err := exec.LookPath("go")
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(os.Getenv("XDG_STATE_HOME"), "sandbox-init-")
	if err != nil {
		return "", err
	}
	// As installed: a directory and a file only their owner may change.
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "toolgate-sandbox-init")
	if b, err := exec.Command(gotool, "build", "-o", out, "github.com/toolgate/toolgate/cmd/toolgate-sandbox-init").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build toolgate-sandbox-init: %w\n%s", err, b)
	}
	return out, nil
})

// buildSandboxInit is the path of cmd/toolgate-sandbox-init built for
// the tests (once).
func buildSandboxInit(t testing.TB) string {
	t.Helper()
	testenv.LookPath(t, "go", "golang-go")
	p, err := builtSandboxInit()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// sandboxedBash is a registry with the bash tool, sandbox required, in a
// fresh workspace of testUID. Its restricted calls start with wantInit,
// unless that is "" (not checked).
func sandboxedBash(t testing.TB, wantInit string) (string, *tools.Registry) {
	t.Helper()
	ws := newWorkspace(t, testUID)
	tool, init, err := bash.NewWithInit(bash.Config{Workspace: ws, Sandbox: bash.ModeRequire})
	if err != nil {
		t.Fatal(err)
	}
	if wantInit != "" && init != wantInit {
		t.Fatalf("restricted calls start with %q, want %q", init, wantInit)
	}
	reg := tools.NewRegistry()
	if err := reg.Register(tool); err != nil {
		t.Fatal(err)
	}
	return ws, reg
}

func needLandlock(t testing.TB) {
	t.Helper()
	testenv.LookPath(t, "bwrap", "bubblewrap")
	if _, _, errno := syscall.Syscall(444, 0, 0, 1); errno != 0 { // landlock_create_ruleset: the ABI version
		testenv.Missing(t, "the kernel has no Landlock: the execute allowlist cannot be enforced")
	}
}

// TestExecuteAllowlist: where Landlock is available, a call the gate
// allowed executes only the programs the gate resolved for it. A gate
// talked around (here, one that allows a command running touch while it
// resolved only ls) does not get touch run: the marker never appears.
// With touch among the programs, it runs. A program whose #! line names
// touch's directory allows nothing beneath it. The same with either
// program the sandbox may start a restricted call with.
func TestExecuteAllowlist(t *testing.T) {
	needLandlock(t)
	ls, _ := exec.LookPath("ls")
	touch, _ := exec.LookPath("touch")
	real := func(p string) string {
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	sandboxInits(t, func(tb testing.TB, wantInit string) {
		t := tb.(*testing.T)
		ws, reg := sandboxedBash(t, wantInit)
		// A script whose #! line names a directory holding touch: its
		// "interpreter" must not become a rule allowing all beneath it.
		dirScript := filepath.Join(ws, "dir-script")
		if err := os.WriteFile(dirScript, []byte("#!"+filepath.Dir(real(touch))+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			name     string
			programs []string
			want     bool // the marker appears
		}{
			{"outside the allowlist", []string{real(ls)}, false},
			{"inside the allowlist", []string{real(ls), real(touch)}, true},
			{"beneath a directory a script names", []string{real(ls), dirScript}, false},
		} {
			t.Run(tt.name, func(t *testing.T) {
				marker := filepath.Join(ws, "marker")
				_ = os.Remove(marker)
				gate := policy.EvaluatorFunc(func(context.Context, policy.Request) policy.Decision {
					return policy.Decision{Action: policy.Allow, Rule: "test", Rendered: true,
						Command: "ls >/dev/null; touch marker", Programs: tt.programs}
				})
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
	})
}

// TestRestrictedCallRunsNoGit: a restricted call gets neither git's
// wrapper nor the repository's sanitised config (git is a runner: a call
// naming it is not restricted), so it must not be able to run git at
// all. A gate talked around (it allowed "git status" resolving only ls)
// in a repository whose config names a program to run: git is refused
// and the program never runs.
func TestRestrictedCallRunsNoGit(t *testing.T) {
	needLandlock(t)
	testenv.LookPath(t, "git", "git")
	ls, _ := exec.LookPath("ls")
	ls, _ = filepath.EvalSymlinks(ls)
	ws, reg := sandboxedBash(t, "")
	plain := tools.NewPipeline(reg, tools.WithWorkspace(ws))
	if out, err := run(context.Background(), t, plain, map[string]any{"command": "git init -q . && git config user.email a@b && git config user.name a"}); err != nil || out.IsError {
		t.Fatal(err, out)
	}
	cfg := filepath.Join(ws, ".git", "config")
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("[core]\n\tfsmonitor = \"touch pwned; false\"\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	gate := policy.EvaluatorFunc(func(context.Context, policy.Request) policy.Decision {
		return policy.Decision{Action: policy.Allow, Rule: "test", Rendered: true, Command: "git status", Programs: []string{ls}}
	})
	p := tools.NewPipeline(reg, tools.WithWorkspace(ws), tools.WithGate(gate))
	out, err := run(context.Background(), t, p, map[string]any{"command": "git status"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ws, "pwned")); err == nil {
		t.Fatalf("the repository's fsmonitor ran:\n%s", out.Content)
	}
	if !strings.Contains(out.Content, "Permission denied") {
		t.Fatalf("git was not refused with EACCES:\n%s", out.Content)
	}
}

// TestRestrictedCallDropsLikeSetpriv: a restricted call (its first
// program is the sandbox's own, which drops root) and an unrestricted one
// (setpriv drops root) end in the same state, by the kernel's account:
// the same user, groups, capability sets (all empty) and no new
// privileges.
func TestRestrictedCallDropsLikeSetpriv(t *testing.T) {
	needLandlock(t)
	cat, _ := exec.LookPath("cat")
	cat, _ = filepath.EvalSymlinks(cat)
	sandboxInits(t, func(tb testing.TB, wantInit string) {
		t := tb.(*testing.T)
		ws, reg := sandboxedBash(t, wantInit)
		status := func(programs []string) string {
			gate := policy.EvaluatorFunc(func(context.Context, policy.Request) policy.Decision {
				return policy.Decision{Action: policy.Allow, Rule: "test", Rendered: true,
					Command: "cat /proc/self/status", Programs: programs}
			})
			p := tools.NewPipeline(reg, tools.WithWorkspace(ws), tools.WithGate(gate))
			if programs == nil {
				// No gate: the call is not restricted.
				p = tools.NewPipeline(reg, tools.WithWorkspace(ws))
			}
			out, err := run(context.Background(), t, p, map[string]any{"command": "cat /proc/self/status"})
			if err != nil || out.IsError {
				t.Fatal(err, out)
			}
			var keep []string
			for _, l := range strings.Split(out.Content, "\n") {
				k, _, _ := strings.Cut(l, ":")
				switch k {
				case "Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp":
					keep = append(keep, strings.Join(strings.Fields(l), " "))
				}
			}
			if len(keep) != 10 {
				t.Fatalf("status lines missing:\n%s", out.Content)
			}
			return strings.Join(keep, "\n")
		}
		restricted, plain := status([]string{cat}), status(nil)
		if restricted != plain {
			t.Fatalf("restricted call:\n%s\nunrestricted call:\n%s", restricted, plain)
		}
		for _, want := range []string{"CapEff: 0000000000000000", "CapBnd: 0000000000000000", "NoNewPrivs: 1"} {
			if !strings.Contains(restricted, want) {
				t.Errorf("restricted call lacks %q:\n%s", want, restricted)
			}
		}
	})
}

// threadAndChildrenCPU is the CPU time of the calling thread (locked by
// the benchmark) and of this process's reaped children: what a call
// costs, without the runtime's other threads.
func threadAndChildrenCPU() time.Duration {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(1, &self) // RUSAGE_THREAD
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + kids.Utime.Nano() + kids.Stime.Nano())
}

// BenchmarkExecuteAllowlist is a sandboxed call of `ls` through a gate
// that resolved ls, with the allowlist (the programs given) and without
// (no programs: not restricted), with either program a restricted call
// may start with. It reports wall and CPU time per call.
func BenchmarkExecuteAllowlist(b *testing.B) {
	needLandlock(b)
	ls, _ := exec.LookPath("ls")
	lsReal, _ := filepath.EvalSymlinks(ls)
	sandboxInits(b, func(tb testing.TB, wantInit string) {
		b := tb.(*testing.B)
		ws, reg := sandboxedBash(b, wantInit)
		for _, bc := range []struct {
			name     string
			programs []string
		}{{"without", nil}, {"with", []string{lsReal}}} {
			b.Run(bc.name, func(b *testing.B) {
				gate := policy.EvaluatorFunc(func(context.Context, policy.Request) policy.Decision {
					return policy.Decision{Action: policy.Allow, Rule: "bench", Rendered: true, Command: "ls", Programs: bc.programs}
				})
				p := tools.NewPipeline(reg, tools.WithWorkspace(ws), tools.WithGate(gate))
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				cpu0 := threadAndChildrenCPU()
				for b.Loop() {
					out, err := p.Handle(context.Background(), &tools.Call{Name: "bash", Arguments: []byte(`{"command":"ls"}`)})
					if err != nil || out.IsError {
						b.Fatal(err, out)
					}
				}
				b.ReportMetric(float64(threadAndChildrenCPU()-cpu0)/float64(b.N)/1e6, "cpu-ms/call")
			})
		}
	})
}
