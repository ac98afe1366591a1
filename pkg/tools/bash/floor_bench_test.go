package bash

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// cpuNow is the CPU time (user and system) of this process's calling
// thread and of its reaped children so far. The thread is locked by the
// benchmark, so the runtime's other threads (the garbage collector, the
// pipes' readers) are not counted: the children are what a call costs.
func cpuNow() time.Duration { return cpuOf(unix.RUSAGE_THREAD) }

// cpuOf is the CPU time (user and system) of who (RUSAGE_THREAD: the
// calling thread; RUSAGE_SELF: this process) and of this process's
// reaped children so far.
func cpuOf(who int) time.Duration {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(who, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// BenchmarkSandboxVsBwrap alternates, in one run, a sandboxed call of the
// bash tool running "true" and its floors: bwrap with the same isolation
// flags (namespaces, the view of the host, seccomp filter, the drop of
// root) running "bash -c true" directly, the same with what the tool
// binds per call (its home, the git wrapper, sanitised configs) and its
// environment (-full), and bare bwrap showing the whole root read-only
// (-rootbind: the view before the sandbox showed only the policy's). It
// reports each one's wall and CPU time (the calling thread's and its
// children's) per call and the ratios, in a plain workspace, in a git
// repository, for a call restricted to its program, and for a call the
// real gate judged (gated: its grant, the scan of the workspace for
// denied and protected files, the read-only workspace, noexec).
func BenchmarkSandboxVsBwrap(b *testing.B) {
	testenv.LookPath(b, "bwrap", "bubblewrap")
	for _, bc := range []struct {
		name                    string
		repo, restricted, gated bool
	}{{"plain", false, false, false}, {"git", true, false, false}, {"restricted", false, true, false}, {"gated", true, true, true}} {
		b.Run(bc.name, func(b *testing.B) { benchSandboxVsBwrap(b, bc.repo, bc.restricted, bc.gated) })
	}
}

// benchSandboxVsBwrap: repo makes the workspace a git repository;
// restricted gives the call a gate's decision that resolved its program
// (true), so that its execution is restricted (the execute allowlist,
// pkg/sandboxinit in setpriv's place) where the machine can; gated
// has the real gate judge "cat f.txt" under a policy denying *.pem files.
func benchSandboxVsBwrap(b *testing.B, repo, restricted, gated bool) {
	ws := b.TempDir()
	if err := os.Chmod(filepath.Dir(ws), 0o755); err != nil {
		b.Fatal(err)
	}
	if repo {
		git := testenv.LookPath(b, "git", "git")
		if out, err := exec.Command(git, "init", "-q", ws).CombinedOutput(); err != nil {
			b.Fatalf("git init: %v: %s", err, out)
		}
	}
	if os.Geteuid() == 0 {
		if err := filepath.Walk(ws, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, 4242, 4242)
		}); err != nil {
			b.Fatal(err)
		}
	}
	if repo {
		// An agent's repository was not configured in the last moments:
		// its sanitised config is kept (gitConfigCache).
		time.Sleep(gitRecent)
	}
	if restricted {
		defer useSmallInit(b)()
	}
	tb, err := newBash(Config{Workspace: ws, Sandbox: ModeRequire})
	if err != nil {
		b.Fatal(err)
	}
	tool := tb.tool()
	bash, err := exec.LookPath("bash")
	if err != nil {
		b.Fatal(err)
	}
	// floor is bwrap with the tool's flags (its sandbox's mounts, hidden
	// directories, namespaces, seccomp filter, drop of root); full adds
	// what the tool binds per call (the call's home, the git wrapper, the
	// repository's sanitised configs) and the tool's environment.
	bwrap := func(full, rootBind bool) func() {
		return func() {
			var files sandboxFiles
			defer files.close()
			filter, err := seccompFile()
			if err != nil {
				b.Fatal(err)
			}
			mounts := []string{"--seccomp", files.add(filter)}
			env := []string{"PATH=" + defaultPath}
			if full {
				home, err := os.MkdirTemp("", "floor-home-")
				if err != nil {
					b.Fatal(err)
				}
				defer os.RemoveAll(home)
				if tb.id.drop {
					_ = os.Chown(home, int(tb.id.uid), int(tb.id.gid))
				}
				mounts = append(mounts, "--bind", home, sandboxHome(ws))
				gw, err := gitWrapperMounts(tb.gitWrapper, files.data)
				if err != nil {
					b.Fatal(err)
				}
				gm, err := gitMounts(context.Background(), ws, tb.gitConfigs, files.data)
				if err != nil {
					b.Fatal(err)
				}
				mounts = append(append(mounts, gw...), gm...)
				env = callEnv(tb.env, sandboxHome(ws), "/tmp")
			}
			sb := tb.sb
			if rootBind {
				sb.view = []string{"--ro-bind", "/", "/"}
			}
			argv := sb.argv(ws, ws, false, tb.id, mounts, []string{bash, "-c", "true"})
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.ExtraFiles = files.files
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
	}
	floor, full, rootFloor := bwrap(false, false), bwrap(true, false), bwrap(false, true)
	args := json.RawMessage(`{"command":"true"}`)
	var decision *policy.Decision
	if restricted {
		truePath, err := exec.LookPath("true")
		if err == nil {
			truePath, err = filepath.EvalSymlinks(truePath)
		}
		if err != nil {
			b.Fatal(err)
		}
		if tb.init == "" {
			b.Skip("no execute allowlist here (no Landlock or no sandbox): a call is never restricted")
		}
		decision = &policy.Decision{Action: policy.Allow, Rule: "bench", Rendered: true, Command: "true", Programs: []string{truePath}}
	}
	if gated {
		for _, f := range []string{"f.txt", "key.pem", "sub/g.txt", "sub/.gitattributes"} {
			if err := os.MkdirAll(filepath.Join(ws, filepath.Dir(f)), 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ws, f), []byte("x\n"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		pol, _, err := policy.Parse([]byte("version: 1\ndefault: ask\ntools:\n  read: { action: allow, constraints: { denied_paths: [\"**/*.pem\"] } }\n  bash: allow\n"), "bench")
		if err != nil {
			b.Fatal(err)
		}
		args = json.RawMessage(`{"command":"cat f.txt"}`)
		d := policy.NewGate(pol).Evaluate(context.Background(), policy.Request{Tool: "bash", Known: true, Kind: policy.KindExecute,
			Arguments: map[string]any{"command": "cat f.txt"}, Workspace: ws})
		if d.Action != policy.Allow || d.Access == nil {
			b.Fatalf("the gate's decision: %+v", d)
		}
		decision = &d
	}
	call := func() {
		out, err := tool.Handler.Handle(context.Background(), &tools.Call{Name: "bash", Arguments: args, Decision: decision})
		if err != nil || out.IsError {
			b.Fatalf("%+v %v", out, err)
		}
	}
	var toolWall, toolCPU, floorWall, floorCPU, fullWall, fullCPU, rootWall, rootCPU time.Duration
	measure := func(fn func(), wall, cpu *time.Duration) {
		c0, t0 := cpuNow(), time.Now()
		fn()
		*wall += time.Since(t0)
		*cpu += cpuNow() - c0
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for b.Loop() {
		measure(call, &toolWall, &toolCPU)
		measure(floor, &floorWall, &floorCPU)
		measure(full, &fullWall, &fullCPU)
		measure(rootFloor, &rootWall, &rootCPU)
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / n }
	b.ReportMetric(ms(toolWall), "tool-ms/call")
	b.ReportMetric(ms(toolCPU), "tool-cpu-ms/call")
	b.ReportMetric(ms(floorWall), "bwrap-ms/call")
	b.ReportMetric(ms(floorCPU), "bwrap-cpu-ms/call")
	b.ReportMetric(ms(fullWall), "bwrap-full-ms/call")
	b.ReportMetric(ms(fullCPU), "bwrap-full-cpu-ms/call")
	b.ReportMetric(ms(rootWall), "bwrap-rootbind-ms/call")
	b.ReportMetric(ms(rootCPU), "bwrap-rootbind-cpu-ms/call")
	b.ReportMetric(float64(toolCPU)/float64(rootCPU), "cpu-ratio-rootbind")
	b.ReportMetric(float64(toolWall)/float64(floorWall), "wall-ratio")
	b.ReportMetric(float64(toolCPU)/float64(floorCPU), "cpu-ratio")
	b.ReportMetric(float64(toolWall)/float64(fullWall), "wall-ratio-full")
	b.ReportMetric(float64(toolCPU)/float64(fullCPU), "cpu-ratio-full")
}

// useSmallInit builds the small first program and has the tools made
// until the returned function runs use it, as an installed worker finds
// it beside itself.
func useSmallInit(b *testing.B) (restore func()) {
	gotool := testenv.LookPath(b, "go", "golang-go")
	small := filepath.Join(b.TempDir(), "toolgate-sandbox-init")
	if out, err := exec.Command(gotool, "build", "-o", small, "github.com/toolgate/toolgate/cmd/toolgate-sandbox-init").CombinedOutput(); err != nil {
		b.Fatalf("go build toolgate-sandbox-init: %v\n%s", err, out)
	}
	if err := os.Chmod(filepath.Dir(small), 0o755); err != nil {
		b.Fatal(err)
	}
	old := sandboxInitPath
	sandboxInitPath = small
	return func() { sandboxInitPath = old }
}

// BenchmarkSandboxThroughput is the rate of trivial sandboxed calls
// ("true") eight at a time, as a worker's pool runs them: calls/s.
func BenchmarkSandboxThroughput(b *testing.B) {
	testenv.LookPath(b, "bwrap", "bubblewrap")
	tool, err := New(Config{Workspace: ownedWorkspace(b), Sandbox: ModeRequire})
	if err != nil {
		b.Fatal(err)
	}
	args := json.RawMessage(`{"command":"true"}`)
	b.SetParallelism(4) // 4 per CPU
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			out, err := tool.Handler.Handle(context.Background(), &tools.Call{Name: "bash", Arguments: args})
			if err != nil || out.IsError {
				b.Errorf("%+v %v", out, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
}

// ownedWorkspace is a workspace the commands of tests run as root (as uid
// 4242) can reach and write.
func ownedWorkspace(tb testing.TB) string {
	tb.Helper()
	ws := tb.TempDir()
	if err := os.Chmod(filepath.Dir(ws), 0o755); err != nil {
		tb.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(ws, 4242, 4242); err != nil {
			tb.Fatal(err)
		}
	}
	return ws
}
