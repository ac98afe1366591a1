package bash_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// testUID owns the workspaces of tests run as root, so that the
// commands, which never run as root, can write them.
const testUID = 4242

func TestMain(m *testing.M) {
	// New warns when commands run without a sandbox, which most tests
	// ask for.
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	testenv.Main(m) // and the relay of TestSandboxNetworkThroughProxy
}

// forEachMode runs fn without a sandbox and, where bubblewrap is installed
// (always under CI), inside one.
func forEachMode(t *testing.T, fn func(t *testing.T, mode bash.Mode)) {
	t.Helper()
	t.Run("off", func(t *testing.T) { fn(t, bash.ModeOff) })
	t.Run("bwrap", func(t *testing.T) {
		testenv.LookPath(t, "bwrap", "bubblewrap")
		fn(t, bash.ModeRequire)
	})
}

// newWorkspace is a fresh workspace owned by uid when the test runs as
// root.
func newWorkspace(t testing.TB, uid int) string {
	t.Helper()
	dir := t.TempDir()
	// t.TempDir's parent is private to the test's user; an unprivileged
	// command must be able to reach the workspace by its path.
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(dir, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// newPipeline registers the bash tool built from cfg in a fresh registry
// and returns the pipeline over it.
func newPipeline(t *testing.T, cfg bash.Config) *tools.Pipeline {
	t.Helper()
	if inTemplate != nil && cfg.Sandbox == bash.ModeRequire {
		return inTemplate(t, cfg)
	}
	tool, err := bash.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	reg := tools.NewRegistry()
	if err := reg.Register(tool); err != nil {
		t.Fatalf("Register: %v", err)
	}
	return tools.NewPipeline(reg, tools.WithWorkspace(cfg.Workspace))
}

// run calls the tool named name (bash when empty) with args through p.
func run(ctx context.Context, t *testing.T, p *tools.Pipeline, args map[string]any, edit ...func(*tools.Call)) (*tools.Output, error) {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	c := &tools.Call{ID: "call-" + t.Name(), Agent: "tester", Name: "bash", Arguments: raw}
	for _, e := range edit {
		e(c)
	}
	return p.Handle(ctx, c)
}

func mustRun(t *testing.T, p *tools.Pipeline, command string) *tools.Output {
	t.Helper()
	out, err := run(context.Background(), t, p, map[string]any{"command": command})
	if err != nil {
		t.Fatalf("%q: %v", command, err)
	}
	return out
}

func md[T any](t *testing.T, out *tools.Output, key string) T {
	t.Helper()
	v, ok := out.Metadata[key].(T)
	if !ok {
		t.Fatalf("metadata %q = %#v (%T), want a %T", key, out.Metadata[key], out.Metadata[key], *new(T))
	}
	return v
}

// sleepArg is a sleep duration no other process on the machine uses, so
// that the processes of one test can be told apart in /proc.
func sleepArg() string {
	return fmt.Sprintf("%d.%09d", 5000+rand.IntN(5000), rand.IntN(1e9))
}

// sleepers lists the live (not zombie) processes running sleep arg.
func sleepers(t *testing.T, arg string) []int {
	t.Helper()
	want := "sleep\x00" + arg + "\x00"
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || string(cmdline) != want {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// waitSleepers polls until n processes run sleep arg, or fails after many
// tries. It bounds a count, not a duration: SIGKILL and fork both
// complete asynchronously.
func waitSleepers(t *testing.T, arg string, n int) {
	t.Helper()
	var pids []int
	for range 2000 {
		if pids = sleepers(t, arg); len(pids) == n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%d processes run sleep %s (pids %v), want %d", len(pids), arg, pids, n)
}

func TestExitCodeStdoutAndStderr(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode bash.Mode) {
		p := newPipeline(t, bash.Config{Workspace: newWorkspace(t, testUID), Sandbox: mode})
		tests := []struct {
			command          string
			code             int
			stdout, stderr   string
			isError          bool
			contentIncludes  []string
			contentExactly   string
			sandboxWantKinds string
		}{
			{command: "printf hello", stdout: "hello", contentExactly: "hello"},
			{command: "true", contentExactly: "(no output)"},
			{command: "echo out; echo err >&2; exit 3", code: 3, stdout: "out\n", stderr: "err\n", isError: true,
				contentExactly: "out\n[stderr]\nerr\n[exit code 3]"},
			{command: "echo warning >&2", stderr: "warning\n", contentExactly: "[stderr]\nwarning\n"},
			{command: "kill -KILL $$", code: 128 + 9, isError: true, contentExactly: "[exit code 137]"},
			{command: "no-such-program-xyz", code: 127, stderr: "bash: line 1: no-such-program-xyz: command not found\n", isError: true},
		}
		for _, tt := range tests {
			out := mustRun(t, p, tt.command)
			if got := md[int](t, out, "exit_code"); got != tt.code {
				t.Errorf("%q: exit_code %d, want %d", tt.command, got, tt.code)
			}
			if got := md[string](t, out, "stdout"); got != tt.stdout {
				t.Errorf("%q: stdout %q, want %q", tt.command, got, tt.stdout)
			}
			if got := md[string](t, out, "stderr"); got != tt.stderr {
				t.Errorf("%q: stderr %q, want %q", tt.command, got, tt.stderr)
			}
			if out.IsError != tt.isError {
				t.Errorf("%q: IsError %v, want %v", tt.command, out.IsError, tt.isError)
			}
			if tt.contentExactly != "" && out.Content != tt.contentExactly {
				t.Errorf("%q: content %q, want %q", tt.command, out.Content, tt.contentExactly)
			}
			if md[bool](t, out, "timed_out") {
				t.Errorf("%q: timed_out set", tt.command)
			}
			wantKind := bash.KindNone
			if mode == bash.ModeRequire {
				wantKind = bash.KindBwrap
			}
			if got := md[string](t, out, "sandbox"); got != wantKind {
				t.Errorf("%q: sandbox %q, want %q", tt.command, got, wantKind)
			}
		}
	})
}

// TestCommandsNeverHoldPrivileges: a root worker's commands run as the
// workspace's owner, or, in a root-owned workspace (root in a container),
// as root with every capability gone, so that they can write the
// workspace and the files keep their owner.
func TestCommandsNeverHoldPrivileges(t *testing.T) {
	if !testenv.AsRoot(t) {
		return
	}
	forEachMode(t, func(t *testing.T, mode bash.Mode) {
		tests := []struct {
			name      string
			owner     int
			uid       int // Config.UID
			wantID    string
			canWrite  bool
			wantCapFx string
		}{
			{name: "workspace owner", owner: testUID, wantID: "4242 4242 4242", canWrite: true},
			{name: "root-owned workspace runs as root without capabilities", owner: 0, wantID: "0 0 0", canWrite: true},
			{name: "configured uid", owner: testUID, uid: 4343, wantID: "4343 65534 65534", canWrite: false},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ws := newWorkspace(t, tt.owner)
				p := newPipeline(t, bash.Config{Workspace: ws, Sandbox: mode, UID: tt.uid})
				out := mustRun(t, p, `echo $(id -u) $(id -g) $(id -G); grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs):' /proc/self/status; echo x > f && echo wrote`)
				lines := strings.Split(md[string](t, out, "stdout"), "\n")
				if lines[0] != tt.wantID {
					t.Errorf("uid gid groups = %q, want %q", lines[0], tt.wantID)
				}
				status := strings.Join(lines[1:], "\n")
				for _, cap := range []string{"CapEff", "CapPrm"} {
					if !strings.Contains(status, cap+":\t0000000000000000") {
						t.Errorf("%s not empty:\n%s", cap, status)
					}
				}
				if mode == bash.ModeRequire || tt.owner == 0 {
					for _, want := range []string{"CapBnd:\t0000000000000000", "NoNewPrivs:\t1"} {
						if !strings.Contains(status, want) {
							t.Errorf("in the sandbox want %q:\n%s", want, status)
						}
					}
				}
				if wrote := strings.Contains(out.Content, "wrote"); wrote != tt.canWrite {
					t.Errorf("wrote the workspace: %v, want %v (%s)", wrote, tt.canWrite, out.Content)
				}
				if tt.canWrite {
					fi, err := os.Stat(filepath.Join(ws, "f"))
					if err != nil {
						t.Fatal(err)
					}
					if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != uint32(tt.owner) {
						t.Errorf("file written by the command belongs to uid %d, want %d", uid, tt.owner)
					}
				}
			})
		}
	})
}

func TestNewRefusesAWorkspaceCommandsCannotEnter(t *testing.T) {
	if !testenv.AsRoot(t) {
		return
	}
	ws := t.TempDir() // its parent is root's alone
	if err := os.Chown(ws, testUID, testUID); err != nil {
		t.Fatal(err)
	}
	_, err := bash.New(bash.Config{Workspace: ws, Sandbox: bash.ModeOff})
	if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "cannot enter "+ws) || !strings.Contains(err.Error(), "4242") {
		t.Errorf("New error %v, want one saying uid 4242 cannot enter the workspace", err)
	}
}

func TestEnvironmentIsScrubbed(t *testing.T) {
	bashEnv := filepath.Join(t.TempDir(), "bash_env")
	if err := os.WriteFile(bashEnv, []byte("echo SOURCED-BASH-ENV\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SECRET_TOKEN", "s3cr3t-value")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-s3cr3t")
	t.Setenv("LD_LIBRARY_PATH", "/nonexistent")
	t.Setenv("GIT_DIR", "/nonexistent")
	t.Setenv("BASH_ENV", bashEnv)
	t.Setenv("ENV", bashEnv)
	forEachMode(t, func(t *testing.T, mode bash.Mode) {
		ws := newWorkspace(t, testUID)
		p := newPipeline(t, bash.Config{Workspace: ws, Sandbox: mode, Env: map[string]string{"TZ": "UTC"}})
		out := mustRun(t, p, `env; echo "token=[$SECRET_TOKEN]"`)
		stdout := md[string](t, out, "stdout")
		for _, leaked := range []string{"s3cr3t", "SECRET", "LD_", "GIT_DIR", "/nonexistent", "BASH_ENV", "SOURCED-BASH-ENV"} {
			if strings.Contains(stdout, leaked) {
				t.Errorf("the command saw %q:\n%s", leaked, stdout)
			}
		}
		if !strings.Contains(stdout, "token=[]") {
			t.Errorf("SECRET_TOKEN not empty:\n%s", stdout)
		}
		names := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
			if name, _, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "token=") {
				names[name] = true
			}
		}
		allowed := map[string]bool{"PATH": true, "HOME": true, "LANG": true, "TZ": true, "PWD": true, "SHLVL": true, "_": true,
			"TERM": true, "TMPDIR": true, "XDG_CONFIG_HOME": true, "XDG_CACHE_HOME": true, "XDG_DATA_HOME": true, "XDG_STATE_HOME": true}
		for name := range names {
			// git's own safety settings are the tool's, not the worker's.
			if !allowed[name] && !strings.HasPrefix(name, "GIT_") && name != "PAGER" {
				t.Errorf("unexpected variable %s in the command's environment", name)
			}
		}
		if strings.Contains(stdout, "HOME="+ws) || !names["HOME"] || !names["PATH"] || !strings.Contains(stdout, "TZ=UTC\n") {
			t.Errorf("want HOME outside the workspace %s, PATH and TZ=UTC:\n%s", ws, stdout)
		}
	})
}

func TestConfigRefusesSecretsAndLoaderVariables(t *testing.T) {
	ws := newWorkspace(t, testUID)
	for _, name := range []string{"GITHUB_TOKEN", "LD_PRELOAD", "BASH_ENV", "DB_PASSWORD", "HOME"} {
		_, err := bash.New(bash.Config{Workspace: ws, Sandbox: bash.ModeOff, Env: map[string]string{name: "x"}})
		if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "env") {
			t.Errorf("Env %s: New error = %v, want one naming the field and the variable", name, err)
		}
	}
	for _, cfg := range []bash.Config{
		{},
		{Workspace: ws, Sandbox: "sometimes"},
		{Workspace: ws, MaxOutput: -1},
		{Workspace: "/"},
		{Workspace: filepath.Join(ws, "missing")},
	} {
		if _, err := bash.New(cfg); err == nil {
			t.Errorf("New(%+v) = nil error", cfg)
		}
	}
}

func TestCancelKillsTheWholeTree(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode bash.Mode) {
		p := newPipeline(t, bash.Config{Workspace: newWorkspace(t, testUID), Sandbox: mode})
		arg := sleepArg()
		// A child, a grandchild orphaned by its subshell, and a child of a
		// nested bash; in the sandbox also one in a new session.
		command := fmt.Sprintf(`sleep %[1]s & (sleep %[1]s &); bash -c 'sleep %[1]s & wait' & `, arg)
		want := 3
		if mode == bash.ModeRequire {
			command += fmt.Sprintf(`setsid sleep %s & `, arg)
			want = 4
		}
		command += "echo ready; wait"
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		seen := 0
		out, err := run(ctx, t, p, map[string]any{"command": command}, func(c *tools.Call) {
			c.Progress = func(stream, chunk string) {
				if stream == bash.Stdout && strings.Contains(chunk, "ready") {
					// The command runs until cancelled: this chunk came
					// while it ran. Cancel once the whole tree is up.
					waitSleepers(t, arg, want)
					seen = len(sleepers(t, arg))
					cancel()
				}
			}
		})
		if !errors.Is(err, context.Canceled) || errors.Is(err, tools.ErrTimeout) {
			t.Fatalf("error %v, want one wrapping context.Canceled and not a timeout", err)
		}
		if seen != want {
			t.Errorf("%d sleepers before cancel, want %d", seen, want)
		}
		if out == nil || !strings.Contains(md[string](t, out, "stdout"), "ready") || md[bool](t, out, "timed_out") {
			t.Errorf("want the partial output and timed_out false, got %+v", out)
		}
		waitSleepers(t, arg, 0)
	})
}

func TestTimeoutKillsGrandchildren(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode bash.Mode) {
		p := newPipeline(t, bash.Config{Workspace: newWorkspace(t, testUID), Sandbox: mode})
		arg := sleepArg()
		command := fmt.Sprintf(`sleep %[1]s & (sleep %[1]s &); bash -c 'sleep %[1]s & wait' & `, arg)
		if mode == bash.ModeRequire {
			command += fmt.Sprintf(`setsid sleep %s & `, arg)
		}
		command += "echo ready; wait"
		out, err := run(context.Background(), t, p, map[string]any{"command": command, "timeout": 1000})
		if !errors.Is(err, tools.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error %v, want one wrapping tools.ErrTimeout and context.DeadlineExceeded", err)
		}
		if !strings.Contains(err.Error(), "1s") {
			t.Errorf("error %q does not say the timeout", err)
		}
		if out == nil || !md[bool](t, out, "timed_out") || !out.IsError || !strings.Contains(md[string](t, out, "stdout"), "ready") {
			t.Fatalf("want partial output with timed_out, got %+v", out)
		}
		if !strings.Contains(out.Content, "timeout of 1s") {
			t.Errorf("content does not say it timed out: %q", out.Content)
		}
		waitSleepers(t, arg, 0)
	})
}

func TestBackgroundProcessesDoNotHangOrOutliveTheCall(t *testing.T) {
	testenv.LookPath(t, "ps", "procps")
	forEachMode(t, func(t *testing.T, mode bash.Mode) {
		p := newPipeline(t, bash.Config{Workspace: newWorkspace(t, testUID), Sandbox: mode})
		arg := sleepArg()
		// The background sleep holds stdout and stderr open.
		out := mustRun(t, p, fmt.Sprintf("sleep %s & echo done", arg))
		if out.Content != "done\n" || out.IsError {
			t.Errorf("content %q IsError %v, want done", out.Content, out.IsError)
		}
		waitSleepers(t, arg, 0)

		// A process in a new session leaves the process group (the loop
		// waits until it has). In the sandbox it still dies with the PID
		// namespace; without one it survives, holding the pipes, but the
		// call does not wait for it past a short grace.
		arg = sleepArg()
		out = mustRun(t, p, fmt.Sprintf(`setsid sleep %s & until [ "$(ps -o sid= -p $! | tr -d ' ')" = "$!" ]; do sleep 0.01; done; echo done`, arg))
		if out.Content != "done\n" {
			t.Errorf("content %q, want done", out.Content)
		}
		// A per-call cgroup (processes_peak is known) holds it as well,
		// and it dies with the call.
		if _, cgroup := out.Metadata["processes_peak"]; mode == bash.ModeRequire || cgroup {
			waitSleepers(t, arg, 0)
			return
		}
		escaped := sleepers(t, arg)
		for _, pid := range escaped {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if len(escaped) != 1 {
			t.Errorf("%d processes escaped into their own session; want 1 (this test's premise)", len(escaped))
		}
	})
}

func TestOneGigabyteOfOutputKeepsMemoryBounded(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode bash.Mode) {
		p := newPipeline(t, bash.Config{Workspace: newWorkspace(t, testUID), Sandbox: mode})
		const total = 1_000_000_000
		var streamed int
		var before, after runtimeMem
		before.read()
		out, err := run(context.Background(), t, p, map[string]any{
			"command": fmt.Sprintf("echo FIRST; yes 'toolgate output line' | head -c %d; echo LAST; echo done >&2", total),
			"timeout": 600000,
		}, func(c *tools.Call) {
			c.Progress = func(_, chunk string) { streamed += len(chunk) }
		})
		after.read()
		if err != nil {
			t.Fatal(err)
		}
		if got := md[int64](t, out, "stdout_bytes"); got != int64(total+len("FIRST\n")+len("LAST\n")) {
			t.Errorf("stdout_bytes %d, want %d", got, total+11)
		}
		stdout := md[string](t, out, "stdout")
		if n := len([]rune(stdout)); n > tools.DefaultMaxOutput {
			t.Errorf("stdout metadata has %d characters, bound %d", n, tools.DefaultMaxOutput)
		}
		if !strings.HasPrefix(stdout, "FIRST\n") || !strings.HasSuffix(stdout, "LAST\n") || !strings.Contains(stdout, "characters truncated]") {
			t.Errorf("stdout does not keep head, tail and the marker: %q ... %q", stdout[:80], stdout[len(stdout)-80:])
		}
		if n := len([]rune(out.Content)); n > tools.DefaultMaxOutput || !strings.Contains(out.Content, "[stderr]\ndone") {
			t.Errorf("content: %d characters (bound %d), stderr kept: %v", n, tools.DefaultMaxOutput, strings.Contains(out.Content, "done"))
		}
		if !md[bool](t, out, "truncated") {
			t.Errorf("truncated not set")
		}
		if streamed > bash.DefaultMaxProgress+1024 || streamed < bash.DefaultMaxProgress {
			t.Errorf("streamed %d bytes of progress, want about %d", streamed, bash.DefaultMaxProgress)
		}
		// What the worker allocated for the whole call, 1 GB of output
		// included: the capture, the read buffers, the rendered strings
		// and the streamed 1 MiB.
		if alloc := after.totalAlloc - before.totalAlloc; alloc > 8<<20 {
			t.Errorf("the call allocated %d bytes for 1 GB of output; want under 8 MiB", alloc)
		} else {
			t.Logf("allocated %d bytes in the worker for %d bytes of output", alloc, total)
		}
	})
}

func TestSandboxConfinesWrites(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	ws := newWorkspace(t, testUID)
	outside, err := os.MkdirTemp("/var/tmp", "toolgate-shell-test-")
	if err != nil {
		t.Fatalf("/var/tmp to test writes outside the workspace: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(outside) })
	if err := os.Chmod(outside, 0o777); err != nil { // anyone may write it outside the sandbox
		t.Fatal(err)
	}
	p := newPipeline(t, bash.Config{Workspace: ws, Sandbox: bash.ModeRequire})
	tag := sleepArg()
	script := strings.Join([]string{
		"touch " + outside + "/f && echo wrote-outside",
		"touch /etc/toolgate-" + tag + " && echo wrote-etc",
		"touch $PWD/../toolgate-" + tag + " && echo wrote-parent",
		"echo x > /tmp/toolgate-" + tag + " && echo wrote-tmp",
		"echo x > /dev/shm/toolgate-" + tag + " && echo wrote-shm",
		"echo x > " + ws + "/inside && echo wrote-inside",
		"mount -t tmpfs none " + outside + " 2>/dev/null && echo mounted",
		"true",
	}, "\n")
	out := mustRun(t, p, script)
	if got, want := md[string](t, out, "stdout"), "wrote-tmp\nwrote-shm\nwrote-inside\n"; got != want {
		t.Errorf("stdout %q, want %q; stderr:\n%s", got, want, md[string](t, out, "stderr"))
	}
	for _, p := range []string{outside + "/f", "/etc/toolgate-" + tag, filepath.Join(filepath.Dir(ws), "toolgate-"+tag), "/tmp/toolgate-" + tag, "/dev/shm/toolgate-" + tag} {
		if _, err := os.Lstat(p); err == nil {
			os.Remove(p)
			t.Errorf("%s exists outside the sandbox", p)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "inside")); err != nil {
		t.Errorf("the write inside the workspace is missing: %v", err)
	}
}

func TestSandboxHidesConfiguredDirectories(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	private, err := os.MkdirTemp("/var/tmp", "toolgate-shell-hide-")
	if err != nil {
		t.Fatalf("/var/tmp: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(private) })
	if err := os.Chmod(private, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(private, "notes"), []byte("private notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws := newWorkspace(t, testUID)
	for _, hide := range []bool{false, true} {
		cfg := bash.Config{Workspace: ws, Sandbox: bash.ModeRequire}
		if hide {
			cfg.Hide = []string{private}
		}
		out := mustRun(t, newPipeline(t, cfg), "cat "+private+"/notes; ls -A "+private+" | wc -l")
		// The sandbox shows none of the host but the system's
		// directories and what the policy lets a call read: hidden or
		// not, the directory is absent.
		want := "0\n"
		if got := md[string](t, out, "stdout"); got != want {
			t.Errorf("hide %v: stdout %q, want %q", hide, got, want)
		}
	}
	if _, err := bash.New(bash.Config{Workspace: ws, Hide: []string{"relative"}}); err == nil || !strings.Contains(err.Error(), "hide") {
		t.Errorf("a relative Hide entry: error %v, want one naming hide", err)
	}
}

func TestSandboxNetworkOnlyWhenGranted(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	ln, accepted := listen(t)
	port := ln.Addr().(*net.TCPAddr).Port
	p := newPipeline(t, bash.Config{
		Workspace:      newWorkspace(t, testUID),
		Sandbox:        bash.ModeRequire,
		NetworkAllowed: func(c *tools.Call) bool { return c.Agent == "networked" },
	})
	command := fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && echo connected", port)
	for _, agent := range []string{"tester", "networked"} {
		out, err := run(context.Background(), t, p, map[string]any{"command": command}, func(c *tools.Call) { c.Agent = agent })
		if err != nil {
			t.Fatal(err)
		}
		granted := agent == "networked"
		if connected := strings.Contains(out.Content, "connected"); connected != granted {
			t.Errorf("agent %s: connected %v, want %v: %s", agent, connected, granted, out.Content)
		}
		if md[bool](t, out, "network") != granted {
			t.Errorf("agent %s: metadata network = %v", agent, out.Metadata["network"])
		}
		if granted {
			testenv.Recv(t, accepted, "accepted") // the listener saw the connection
		}
	}
	ln.Close()
	if n := len(accepted); n != 0 {
		t.Errorf("the listener accepted %d connections from the call without network", n)
	}
}

// TestUnprivilegedWorker runs this test binary again as nobody, so that
// the path of a worker that is not root (bwrap in a user namespace, no
// setpriv, no uid switch) is exercised as well as the root one.
func TestUnprivilegedWorker(t *testing.T) {
	if ws := os.Getenv("TOOLGATE_SHELL_WORKER_WS"); ws != "" {
		unprivilegedWorker(t, ws)
		return
	}
	if os.Geteuid() != 0 { // the worker is unprivileged already
		unprivilegedWorker(t, newWorkspace(t, 0))
		return
	}
	testenv.LookPath(t, "bwrap", "bubblewrap")
	testenv.LookPath(t, "curl", "curl") // the egress proxy's part
	setpriv := testenv.LookPath(t, "setpriv", "util-linux")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary lives in a directory only root may enter.
	bin := filepath.Join(newWorkspace(t, 0), "shell.test")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	ws := newWorkspace(t, 65534)
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--",
		bin, "-test.run=^TestUnprivilegedWorker$", "-test.v", "-test.count=1")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "TMPDIR=/tmp", "TOOLGATE_SHELL_WORKER_WS=" + ws, "CI=" + os.Getenv("CI")}
	out, err := cmd.CombinedOutput()
	if strings.Contains(string(out), "--- SKIP") { // what it missed, from testenv.Missing
		testenv.Missing(t, "as nobody: "+string(out))
	}
	if err != nil || !strings.Contains(string(out), "--- PASS: TestUnprivilegedWorker") {
		t.Fatalf("the test as nobody failed: %v\n%s", err, out)
	}
}

func unprivilegedWorker(t *testing.T, ws string) {
	sb, err := bash.Detect(bash.ModeRequire)
	if err != nil {
		testenv.Missing(t, "bwrap cannot build a sandbox for an unprivileged worker here ("+err.Error()+"): the kernel must let users "+
			"create user namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0, and on Ubuntu "+
			"kernel.apparmor_restrict_unprivileged_userns=0)")
	}
	if sb.Setpriv != "" {
		t.Errorf("an unprivileged worker needs no setpriv, Detect found %q", sb.Setpriv)
	}
	ln, accepted := listen(t)
	p := newPipeline(t, bash.Config{Workspace: ws, Sandbox: bash.ModeRequire})
	tag := sleepArg()
	out := mustRun(t, p, fmt.Sprintf(`id -u; echo x > f && echo wrote
touch /var/tmp/toolgate-%[1]s && echo wrote-outside
exec 3<>/dev/tcp/127.0.0.1/%[2]d && echo connected
true`, tag, ln.Addr().(*net.TCPAddr).Port))
	if got := md[string](t, out, "sandbox"); got != bash.KindBwrap {
		t.Errorf("sandbox %q, want bwrap", got)
	}
	if got, want := md[string](t, out, "stdout"), fmt.Sprintf("%d\nwrote\n", os.Geteuid()); got != want {
		t.Errorf("stdout %q, want %q; stderr %s", got, want, md[string](t, out, "stderr"))
	}
	if _, err := os.Stat("/var/tmp/toolgate-" + tag); err == nil {
		os.Remove("/var/tmp/toolgate-" + tag)
		t.Errorf("wrote /var/tmp outside the sandbox")
	}
	ln.Close()
	if len(accepted) != 0 {
		t.Errorf("reached the host's loopback without network")
	}
	// The egress proxy serves an unprivileged worker's sandbox too: the
	// relay runs in the sandbox's user and network namespaces.
	srv, hits := countingServer(t)
	dns := testenv.StartDNS(t, map[string][]netip.Addr{"allowed.test": {netip.MustParseAddr("127.0.0.1")}})
	pol, _, err := policy.Parse([]byte(`network: {allow: ["allowed.test:`+port(t, srv.URL)+`"]}`), "test")
	if err != nil {
		t.Fatal(err)
	}
	var opened atomic.Int64
	proxied := newPipeline(t, bash.Config{Workspace: ws, Sandbox: bash.ModeRequire, NetworkAllowed: func(*tools.Call) bool { return true },
		Proxy: testProxy(t, policy.NewGate(pol), dns, &opened)})
	out = mustRun(t, proxied, "curl -sS -o /dev/null -w '%{http_code} ' http://allowed.test:"+port(t, srv.URL)+
		"/; curl -sS -o /dev/null -w '%{http_code}' --noproxy '*' http://127.0.0.1:"+port(t, srv.URL)+"/; true")
	if got := md[string](t, out, "stdout"); got != "200 000" || hits.Load() != 1 {
		t.Errorf("unprivileged worker through the proxy: stdout %q (want 200 000), %d requests (want 1); stderr %s",
			got, hits.Load(), md[string](t, out, "stderr"))
	}
	// Without cgroups (root's here), a user namespace of the call's own
	// still bounds its processes, whatever else runs as this user.
	out = mustRun(t, p, `perl -e 'my $n = 0; for (1..700) { my $p = fork(); last unless defined $p; if ($p == 0) { sleep 600; exit 0 } $n++ } print "started=$n\n"'`)
	t.Logf("unprivileged worker, 700-fork loop: %s", strings.TrimSpace(out.Content))
	if !strings.Contains(out.Content, "started=") || strings.Contains(out.Content, "started=700") {
		t.Errorf("one call of an unprivileged worker held 700 processes: %s", out.Content)
	}
}

func TestCwdStaysInTheWorkspace(t *testing.T) {
	ws := newWorkspace(t, testUID)
	for _, d := range []string{"sub/deeper", "..dots"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ws, "file.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"link-out": "/etc", "link-rel-out": "../..", "link-in": "sub"} {
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	p := newPipeline(t, bash.Config{Workspace: ws, Sandbox: bash.ModeOff})
	tests := []struct {
		cwd     string
		want    string // pwd -P, or the error's words
		refused bool
	}{
		{cwd: "", want: ws},
		{cwd: ".", want: ws},
		{cwd: "sub", want: ws + "/sub"},
		{cwd: "sub/deeper/..", want: ws + "/sub"},
		{cwd: ws + "/sub/deeper", want: ws + "/sub/deeper"},
		{cwd: "link-in", want: ws + "/sub"},
		{cwd: "..dots", want: ws + "/..dots"},
		{cwd: "..", want: "outside the workspace", refused: true},
		{cwd: "sub/../../x", want: "outside the workspace", refused: true},
		{cwd: "/etc", want: "outside the workspace", refused: true},
		{cwd: filepath.Dir(ws), want: "outside the workspace", refused: true},
		{cwd: "link-out", want: "leads outside the workspace", refused: true},
		{cwd: "link-rel-out", want: "leads outside the workspace", refused: true},
		{cwd: "missing", want: "does not exist", refused: true},
		{cwd: "~", want: "does not exist", refused: true},
		{cwd: "file.txt", want: "not a directory", refused: true},
	}
	for _, tt := range tests {
		out, err := run(context.Background(), t, p, map[string]any{"command": "pwd -P", "cwd": tt.cwd})
		if tt.refused {
			var ae *tools.ArgumentError
			if !errors.Is(err, tools.ErrInvalidArguments) || !errors.As(err, &ae) || ae.Fields[0].Field != "/cwd" || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("cwd %q: error %v, want an invalid /cwd argument saying %q", tt.cwd, err, tt.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("cwd %q: %v", tt.cwd, err)
			continue
		}
		if got := strings.TrimSpace(out.Content); got != tt.want {
			t.Errorf("cwd %q: pwd %q, want %q", tt.cwd, got, tt.want)
		}
	}
}

func TestArgumentsAndAliases(t *testing.T) {
	p := newPipeline(t, bash.Config{Workspace: newWorkspace(t, testUID), Sandbox: bash.ModeOff})
	bad := []map[string]any{
		{},
		{"command": ""},
		{"command": "   "},
		{"command": 42},
		{"command": "true", "timeout": 600001},
		{"command": "true", "timeout": -1},
		{"command": "true", "timeout": 1.5},
		{"command": "true", "timeout": "5"},
		{"command": "true", "cwd": 7},
		{"command": "true", "run_in_background": true},
	}
	for _, args := range bad {
		if _, err := run(context.Background(), t, p, args); !errors.Is(err, tools.ErrInvalidArguments) {
			t.Errorf("args %v: error %v, want ErrInvalidArguments", args, err)
		}
	}
	for _, name := range []string{"bash", "run_shell", "exec"} {
		out, err := run(context.Background(), t, p, map[string]any{"command": "echo $((6*7))", "timeout": 0, "description": "arithmetic"},
			func(c *tools.Call) { c.Name = name })
		if err != nil || out.Content != "42\n" {
			t.Errorf("%s: %+v, %v", name, out, err)
		}
	}
	tool, _ := p.Registry().Get("bash")
	if tool.DefaultTimeout != 60*time.Second || tool.MaxTimeout != 600*time.Second || tool.Kind != "execute" {
		t.Errorf("tool timeouts %s/%s kind %s", tool.DefaultTimeout, tool.MaxTimeout, tool.Kind)
	}
}

func TestHandlerChecksArgumentsWithoutThePipeline(t *testing.T) {
	tool, err := bash.New(bash.Config{Workspace: newWorkspace(t, testUID), Sandbox: bash.ModeOff})
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{`{}`, `{"command":""}`, `{"command":"true","timeout":9999999}`, `{"command":"a\u0000b"}`, `[1]`} {
		_, err := tool.Handler.Handle(context.Background(), &tools.Call{Name: "bash", Arguments: json.RawMessage(raw)})
		if !errors.Is(err, tools.ErrInvalidArguments) {
			t.Errorf("%s: error %v, want ErrInvalidArguments", raw, err)
		}
	}
	out, err := tool.Handler.Handle(context.Background(), &tools.Call{Name: "bash", Arguments: json.RawMessage(`{"command":"echo direct"}`)})
	if err != nil || out.Content != "direct\n" {
		t.Errorf("direct call: %+v, %v", out, err)
	}
}

func TestProgressStreamsWhatThePipelineReturns(t *testing.T) {
	p := newPipeline(t, bash.Config{Workspace: newWorkspace(t, testUID), Sandbox: bash.ModeOff})
	var want strings.Builder
	for i := 1; i <= 3000; i++ {
		fmt.Fprintf(&want, "line %d é\n", i)
	}
	var got = map[string]*strings.Builder{bash.Stdout: {}, bash.Stderr: {}}
	chunks := 0
	_, err := run(context.Background(), t, p, map[string]any{"command": `for i in $(seq 1 3000); do echo "line $i é"; done; echo oops >&2`},
		func(c *tools.Call) {
			c.Progress = func(stream, chunk string) {
				chunks++
				if len(chunk) > 8<<10 || !utf8Valid(chunk) {
					t.Errorf("chunk of %d bytes, valid UTF-8 %v", len(chunk), utf8Valid(chunk))
				}
				got[stream].WriteString(chunk)
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	if got[bash.Stdout].String() != want.String() {
		t.Errorf("streamed stdout differs from what the command printed (%d vs %d bytes)", got[bash.Stdout].Len(), want.Len())
	}
	if got[bash.Stderr].String() != "oops\n" {
		t.Errorf("streamed stderr %q", got[bash.Stderr].String())
	}
	if chunks < 2 {
		t.Errorf("%d chunks for %d bytes: not coalesced into bounded chunks", chunks, want.Len())
	}
}

func TestResourceLimits(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode bash.Mode) {
		p := newPipeline(t, bash.Config{Workspace: newWorkspace(t, testUID), Sandbox: mode,
			Limits: bash.Limits{CPUSeconds: 7, FileSize: 1 << 20, AddressSpace: 2 << 30, OpenFiles: 77}})
		out := mustRun(t, p, `ulimit -t; ulimit -f; ulimit -v; ulimit -n; ulimit -c; ulimit -H -n
ulimit -n 78 2>/dev/null && echo raised
head -c 2000000 /dev/zero > big; echo "rc=$?"; stat -c %s big`)
		if got, want := md[string](t, out, "stdout"), "7\n1024\n2097152\n77\n0\n77\nrc=153\n1048576\n"; got != want {
			t.Errorf("limits seen by the command:\n%s\nwant:\n%s", got, want)
		}
	})
}

func TestContentStaysWithinMaxOutput(t *testing.T) {
	const max = 1000
	p := newPipeline(t, bash.Config{Workspace: newWorkspace(t, testUID), Sandbox: bash.ModeOff, MaxOutput: max})
	out := mustRun(t, p, `for i in $(seq 1 2000); do echo "out $i"; done; for i in $(seq 1 2000); do echo "err $i" >&2; done; exit 2`)
	for _, key := range []string{"stdout", "stderr"} {
		s := md[string](t, out, key)
		if n := len([]rune(s)); n > max || !strings.Contains(s, "characters truncated") {
			t.Errorf("%s: %d characters, bound %d", key, n, max)
		}
	}
	c := out.Content
	if n := len([]rune(c)); n > max {
		t.Errorf("content: %d characters, bound %d", n, max)
	}
	for _, want := range []string{"out 1\n", "out 2000\n", "[stderr]\nerr 1\n", "err 2000\n", "[exit code 2]"} {
		if !strings.Contains(c, want) {
			t.Errorf("content lacks %q:\n%s", want, c)
		}
	}
	if _, cutByPipeline := out.Metadata["truncated_chars"]; cutByPipeline {
		t.Errorf("the pipeline had to cut the content again")
	}
}

func TestDetect(t *testing.T) {
	sb, err := bash.Detect(bash.ModeOff)
	if err != nil || sb.Enabled() || sb.Kind != bash.KindNone || sb.Reason == "" {
		t.Errorf("Detect(off) = %+v, %v", sb, err)
	}
	if _, err := bash.Detect("sometimes"); !errors.Is(err, bash.ErrInvalidMode) {
		t.Errorf("Detect(sometimes) error %v, want ErrInvalidMode", err)
	}
	t.Run("bwrap installed", func(t *testing.T) {
		bwrap := testenv.LookPath(t, "bwrap", "bubblewrap")
		for _, mode := range []bash.Mode{"", bash.ModeAuto, bash.ModeRequire} {
			sb, err := bash.Detect(mode)
			if err != nil || sb.Kind != bash.KindBwrap || sb.Bwrap != bwrap || !strings.HasPrefix(sb.Version, "bubblewrap ") {
				t.Errorf("Detect(%q) = %+v, %v", mode, sb, err)
			}
			if (sb.Setpriv != "") != (os.Geteuid() == 0) {
				t.Errorf("Detect(%q): setpriv %q with euid %d", mode, sb.Setpriv, os.Geteuid())
			}
			if !strings.Contains(sb.String(), bwrap) {
				t.Errorf("String() = %q does not name bwrap", sb.String())
			}
		}
	})
	t.Run("bwrap missing", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		sb, err := bash.Detect(bash.ModeAuto)
		if err != nil || sb.Enabled() || !strings.Contains(sb.Reason, "bwrap not found") || !strings.Contains(sb.String(), "WITHOUT") {
			t.Errorf("Detect(auto) = %+v, %v; want none, saying why", sb, err)
		}
		if _, err := bash.Detect(bash.ModeRequire); !errors.Is(err, bash.ErrSandboxUnavailable) {
			t.Errorf("Detect(require) error %v, want ErrSandboxUnavailable", err)
		}
		ws := newWorkspace(t, testUID)
		if _, err := bash.New(bash.Config{Workspace: ws, Sandbox: bash.ModeRequire, Shell: "/bin/bash"}); !errors.Is(err, bash.ErrSandboxUnavailable) {
			t.Errorf("New(require) error %v, want ErrSandboxUnavailable", err)
		}
		p := newPipeline(t, bash.Config{Workspace: ws, Shell: "/bin/bash"})
		if out := mustRun(t, p, "echo hi"); md[string](t, out, "sandbox") != bash.KindNone || out.Content != "hi\n" {
			t.Errorf("auto without bwrap: %+v", out)
		}
	})
}

// listen opens a loopback listener on the host and reports each
// connection it accepts.
func listen(t *testing.T) (net.Listener, chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	return ln, accepted
}

type runtimeMem struct{ totalAlloc uint64 }

func (m *runtimeMem) read() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.totalAlloc = ms.TotalAlloc
}

func utf8Valid(s string) bool { return utf8.ValidString(s) }
