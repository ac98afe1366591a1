package bash_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// forkLoop is a perl program that forks up to n children that each
// sleep, and prints how many it started: how many processes the call
// could hold at once. perl is in every Debian (perl-base).
func forkLoop(n int) string {
	return `perl -e 'my $n = 0; for (1..` + strconv.Itoa(n) + `) { my $p = fork(); last unless defined $p; if ($p == 0) { sleep 600; exit 0 } $n++ } print "started=$n\n"'`
}

// TestProcessesArePerCallBounded: a fork bomb in one call must not take
// the host. With a limit of 40 processes, a call cannot hold more than
// that at once, whatever it tries.
func TestProcessesArePerCallBounded(t *testing.T) {
	testenv.LookPath(t, "perl", "perl-base")
	testenv.LookPath(t, "bwrap", "bubblewrap")
	for _, mode := range []bash.Mode{bash.ModeRequire, bash.ModeOff} {
		t.Run(string(mode), func(t *testing.T) { testProcessesArePerCallBounded(t, mode) })
	}
}

func testProcessesArePerCallBounded(t *testing.T, mode bash.Mode) {
	const limit = 40
	p := newPipeline(t, bash.Config{Workspace: newWorkspace(t, testUID), Sandbox: mode,
		Limits: bash.Limits{Processes: limit}})
	out := mustRun(t, p, forkLoop(300))
	_, v, ok := strings.Cut(md[string](t, out, "stdout"), "started=")
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if !ok || err != nil {
		t.Fatalf("no count: %s", out.Content)
	}
	t.Logf("limit %d: the call started %d processes; peak %v", limit, n, out.Metadata["processes_peak"])
	if n >= limit {
		t.Errorf("one call held %d processes at once, want fewer than %d", n, limit)
	}
	if n < 5 {
		t.Errorf("only %d processes started; the limit should leave room for ordinary work", n)
	}
	// Without a configured limit, a call is still bounded.
	p = newPipeline(t, bash.Config{Workspace: newWorkspace(t, testUID), Sandbox: mode})
	out = mustRun(t, p, forkLoop(700))
	t.Logf("default limit: %s; peak %v", strings.TrimSpace(out.Content), out.Metadata["processes_peak"])
	if !strings.Contains(out.Content, "started=") || strings.Contains(out.Content, "started=700") {
		t.Errorf("with the default limits one call held 700 processes at once: %s", out.Content)
	}
}

// TestCommandStartsInItsCgroups: on a cgroup v1 host (where the worker
// starts commands in their cgroups from a thread that moves itself in and
// back out), a running command is in its call's pids and memory cgroups,
// sandboxed or not, and none of the worker's threads is left in them.
func TestCommandStartsInItsCgroups(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	if os.Geteuid() != 0 {
		t.Skip("per-call cgroups of this kind need a root worker")
	}
	for _, mode := range []bash.Mode{bash.ModeRequire, bash.ModeOff} {
		t.Run(string(mode), func(t *testing.T) {
			ws := newWorkspace(t, testUID)
			p := newPipeline(t, bash.Config{Workspace: ws, Sandbox: mode, Limits: bash.Limits{Memory: 256 << 20}})
			// The command reads its cgroups, says it started, and waits
			// for the release while the test looks at the worker's
			// threads.
			done := make(chan *tools.Output, 1)
			go func() {
				out, err := run(context.Background(), t, p, map[string]any{
					"command": `cat /proc/self/cgroup; touch started; until [ -e release ]; do sleep 0.01; done`})
				if err != nil {
					out = &tools.Output{IsError: true, Content: err.Error()}
				}
				done <- out
			}()
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
				if _, err := os.Stat(filepath.Join(ws, "started")); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the command did not start within a minute")
				}
			}
			if n := threadsInCallCgroups(t); n != 0 {
				t.Errorf("%d of the worker's threads are in a call's cgroup while the command runs", n)
			}
			held := callCgroupsHolding(t)
			if err := os.WriteFile(filepath.Join(ws, "release"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			out := testenv.Recv(t, done, "the call's result")
			if out.IsError {
				t.Fatal(out.Content)
			}
			if _, ok := held["pids"]; !ok {
				t.Skip("the call cgroups are not in a cgroup v1 pids hierarchy: on cgroup v2 commands are cloned into theirs (CLONE_INTO_CGROUP)")
			}
			for c := range held {
				if held[c] == 0 {
					t.Errorf("no %s cgroup of a call holds a process while the command runs (%v)", c, held)
				}
				if mode != bash.ModeOff {
					continue // the sandbox has a cgroup namespace of its own
				}
				// The command itself says it is in its call's cgroup.
				in := false
				for _, l := range strings.Split(md[string](t, out, "stdout"), "\n") {
					parts := strings.SplitN(l, ":", 3)
					in = in || len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), c) && strings.Contains(parts[2], "/toolgate/"+strconv.Itoa(os.Getpid())+"-")
				}
				if !in {
					t.Errorf("the command is not in its call's %s cgroup: %s", c, md[string](t, out, "stdout"))
				}
			}
		})
	}
}

// callCgroupsHolding counts, per v1 controller (pids, memory) whose
// hierarchy holds the worker's call cgroups, those (toolgate/<pid>-<n>
// beside this process's cgroup) that hold a process other than this one.
func callCgroupsHolding(t *testing.T) map[string]int {
	t.Helper()
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]int{}
	for _, c := range []string{"pids", "memory"} {
		var point, root, path string
		for _, l := range strings.Split(string(mi), "\n") {
			pre, post, ok := strings.Cut(l, " - ")
			a, b := strings.Fields(pre), strings.Fields(post)
			if ok && len(a) >= 5 && len(b) >= 3 && b[0] == "cgroup" && slices.Contains(strings.Split(b[2], ","), c) {
				root, point = a[3], a[4]
			}
		}
		for _, l := range strings.Split(string(self), "\n") {
			if parts := strings.SplitN(l, ":", 3); len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), c) {
				path = strings.TrimPrefix(parts[2], root)
			}
		}
		if point == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(point, path, "toolgate")); err != nil {
			continue // the worker's call cgroups are not in this hierarchy
		}
		held[c] += 0
		dirs, _ := filepath.Glob(filepath.Join(point, path, "toolgate", strconv.Itoa(os.Getpid())+"-*"))
		for _, d := range dirs {
			b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			if err == nil && len(slices.DeleteFunc(strings.Fields(string(b)), func(p string) bool { return p == strconv.Itoa(os.Getpid()) })) > 0 {
				held[c]++
			}
		}
	}
	return held
}

// threadsInCallCgroups counts this process's threads that are in a
// call's cgroup (toolgate/<pid>-<n>).
func threadsInCallCgroups(t *testing.T) int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "cgroup"))
		if err != nil {
			continue // the thread ended
		}
		if strings.Contains(string(b), "/toolgate/"+strconv.Itoa(os.Getpid())+"-") {
			n++
		}
	}
	return n
}

// TestSeccompDeniesKernelAttackSurface: inside the sandbox, the system
// calls that reach the kernel's riskier parts or build new namespaces
// fail with EPERM (clone3 with ENOSYS, so that libc falls back to clone,
// whose flags the filter can read), and the ordinary ones still work.
func TestSeccompDeniesKernelAttackSurface(t *testing.T) {
	testenv.LookPath(t, "perl", "perl-base")
	testenv.LookPath(t, "bwrap", "bubblewrap")
	p := newPipeline(t, bash.Config{Workspace: newWorkspace(t, testUID), Sandbox: bash.ModeRequire})
	// name nr args...: the machine's numbers (x/sys/unix's table for
	// GOARCH); perl's syscall returns -1 and sets $! on failure.
	nr := func(n int) string { return strconv.Itoa(n) }
	calls := [][]string{
		{"ptrace", nr(unix.SYS_PTRACE), "0", "0", "0", "0"}, // PTRACE_TRACEME
		{"keyctl", nr(unix.SYS_KEYCTL), "0", "-3", "0"},     // KEYCTL_GET_KEYRING_ID, session
		{"add_key", nr(unix.SYS_ADD_KEY), "0", "0", "0", "0", "0"},
		{"request_key", nr(unix.SYS_REQUEST_KEY), "0", "0", "0", "0"},
		{"bpf", nr(unix.SYS_BPF), "0", "0", "0"},
		{"io_uring_setup", nr(unix.SYS_IO_URING_SETUP), "1", "0"},
		{"perf_event_open", nr(unix.SYS_PERF_EVENT_OPEN), "0", "0", "-1", "-1", "0"},
		{"personality", nr(unix.SYS_PERSONALITY), "4194304"}, // READ_IMPLIES_EXEC
		{"unshare", nr(unix.SYS_UNSHARE), nr(unix.CLONE_NEWUSER)},
		{"unshare_ns", nr(unix.SYS_UNSHARE), nr(unix.CLONE_NEWNS)},
		{"setns", nr(unix.SYS_SETNS), "0", "0"},
		{"clone_newuser", nr(unix.SYS_CLONE), nr(unix.CLONE_NEWUSER | int(unix.SIGCHLD)), "0", "0", "0", "0"}, // flags first on every architecture toolgate filters
		{"clone3", nr(unix.SYS_CLONE3), "0", "0"},
		{"mount", nr(unix.SYS_MOUNT), "0", "0", "0", "0", "0"},
		{"kexec_load", nr(unix.SYS_KEXEC_LOAD), "0", "0", "0", "0"},
		{"init_module", nr(unix.SYS_INIT_MODULE), "0", "0", "0"},
		{"userfaultfd", nr(unix.SYS_USERFAULTFD), "0"},
		{"open_by_handle_at", nr(unix.SYS_OPEN_BY_HANDLE_AT), "0", "0", "0"},
	}
	var script strings.Builder
	script.WriteString("perl -e '")
	for _, c := range calls {
		script.WriteString(`$! = 0; my $r_` + c[0] + ` = syscall(` + strings.Join(c[1:], ", ") + `); print "` + c[0] + `=", ($r_` + c[0] + ` == -1 ? $!+0 : "ok"), "\n";`)
	}
	script.WriteString(`print "personality_query=", (syscall(` + nr(unix.SYS_PERSONALITY) + `, 4294967295) == -1 ? $!+0 : "ok"), "\n";`)
	script.WriteString(`print "getpid=", (syscall(` + nr(unix.SYS_GETPID) + `) > 0 ? "ok" : $!+0), "\n";'`)
	script.WriteString("; unshare -U true 2>/dev/null && echo unshare-U=ok || echo unshare-U=denied")
	script.WriteString("; unshare -rm true 2>/dev/null && echo unshare-rm=ok || echo unshare-rm=denied")
	out := mustRun(t, p, script.String())
	got := map[string]string{}
	for _, line := range strings.Split(md[string](t, out, "stdout"), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	for _, c := range calls {
		want := nr(int(unix.EPERM))
		if c[0] == "clone3" {
			want = nr(int(unix.ENOSYS))
		}
		if got[c[0]] != want {
			t.Errorf("%s: got %q, want errno %s", c[0], got[c[0]], want)
		}
	}
	for k, want := range map[string]string{"personality_query": "ok", "getpid": "ok", "unshare-U": "denied", "unshare-rm": "denied"} {
		if got[k] != want {
			t.Errorf("%s: got %q, want %s\n%s", k, got[k], want, out.Content)
		}
	}
	// Threads and child processes still work (clone without namespace
	// flags, and libc's fallback from clone3).
	out = mustRun(t, p, `sh -c 'echo child' && perl -e 'my $p = fork(); if ($p == 0) { exit 7 } waitpid($p, 0); print "status=", $? >> 8, "\n"'`)
	if !strings.Contains(out.Content, "child") || !strings.Contains(out.Content, "status=7") {
		t.Errorf("ordinary processes broke: %s", out.Content)
	}
}

// TestLimitsByTheirEffect: memory, file size and CPU time limits stop a
// command that goes past them, in and out of the sandbox.
func TestLimitsByTheirEffect(t *testing.T) {
	testenv.LookPath(t, "perl", "perl-base")
	forEachMode(t, func(t *testing.T, mode bash.Mode) {
		p := newPipeline(t, bash.Config{Workspace: newWorkspace(t, testUID), Sandbox: mode,
			Limits: bash.Limits{AddressSpace: 256 << 20, FileSize: 1 << 20, CPUSeconds: 1}})
		for _, tt := range []struct{ name, cmd, want string }{
			// 512 MiB in one allocation is past the address space.
			{"memory", `perl -e '$x = "x" x (512 * 1024 * 1024); print "allocated\n"' 2>/dev/null; echo "rc=$?"`, "rc="},
			{"file size", `head -c 2000000 /dev/zero > big; echo "rc=$?"; stat -c %s big`, "rc=153\n1048576"},
			// SIGKILL (128+9): the soft limit is the hard one.
			{"cpu", `bash -c 'while :; do :; done'; echo "rc=$?"`, "rc=137"},
		} {
			out := mustRun(t, p, tt.cmd)
			stdout := md[string](t, out, "stdout")
			if !strings.Contains(stdout, tt.want) || strings.Contains(stdout, "allocated") {
				t.Errorf("%s: %q, want %q and no success", tt.name, stdout, tt.want)
			}
		}
	})
}

// TestMemoryIsPerCallBounded: processes of one call share one memory
// budget (the call's cgroup), however many there are.
func TestMemoryIsPerCallBounded(t *testing.T) {
	testenv.LookPath(t, "perl", "perl-base")
	testenv.LookPath(t, "bwrap", "bubblewrap")
	p := newPipeline(t, bash.Config{Workspace: newWorkspace(t, testUID), Sandbox: bash.ModeRequire,
		Limits: bash.Limits{Memory: 96 << 20, AddressSpace: -1}})
	// Four processes of about 40 MiB each (perl builds the string and
	// copies it), alive at once.
	const one = `perl -e '$x = "x" x (20 * 1024 * 1024); sleep 1; print "alive\n"'`
	out := mustRun(t, p, "for i in 1 2 3 4; do "+one+" & done; wait")
	if _, ok := out.Metadata["memory_limit"]; !ok {
		testenv.Missing(t, "the worker cannot make memory cgroups here (RLIMIT_AS bounds each process only): the test needs a writable cgroup v2 hierarchy "+
			"with the memory controller (run it as root, or in a delegated cgroup: systemd-run --user --scope -p Delegate=yes go test ...)")
	}
	if n := strings.Count(md[string](t, out, "stdout"), "alive"); n > 2 {
		t.Errorf("%d processes of about 40 MiB each lived at once under a 96 MiB call limit", n)
	}
	t.Logf("under 96 MiB: %d of 4 processes of about 40 MiB survived", strings.Count(md[string](t, out, "stdout"), "alive"))
	// One of them alone fits: the limit is the call's total.
	out = mustRun(t, p, one)
	if !strings.Contains(out.Content, "alive") {
		t.Errorf("one process of about 40 MiB failed under 96 MiB: %s", out.Content)
	}
}

// TestCommonProgramsWorkUnderTheFilter: the seccomp filter and the limits
// leave ordinary work alone: threads, subprocesses, runtimes that probe
// io_uring or clone3 and fall back.
func TestCommonProgramsWorkUnderTheFilter(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	p := newPipeline(t, bash.Config{Workspace: newWorkspace(t, testUID), Sandbox: bash.ModeRequire})
	checks := []struct{ prog, cmd, want string }{
		{"perl", `perl -e 'my $p = fork(); if (!$p) { exit 3 } waitpid($p, 0); print "perl ", $? >> 8, "\n"'`, "perl 3"},
		{"python3", `python3 -c 'import threading, subprocess; t = threading.Thread(target=print, args=("thread",)); t.start(); t.join(); print(subprocess.run(["true"]).returncode)'`, "thread\n0"},
		{"node", `node -e 'require("fs").readFile("/etc/hostname", () => console.log("node ok"))'`, "node ok"},
		{"git", `git --version`, "git version"},
		{"sort", `seq 100000 | sort -rn --parallel=4 | head -1`, "100000"},
	}
	for _, c := range checks {
		if _, err := exec.LookPath(c.prog); err != nil {
			t.Logf("%s not installed; not checked", c.prog)
			continue
		}
		out := mustRun(t, p, c.cmd)
		if out.IsError || !strings.Contains(out.Content, c.want) {
			t.Errorf("%s under the filter: %s", c.prog, out.Content)
		}
	}
}

// TestRootCommandsSeeTheirProgramsNotRootsSecrets: in a root-owned
// workspace commands run as root without capabilities; /root is hidden
// from them, except the directories of PATH entries installed there.
// Without the machine's root the test runs as root of a user namespace
// (testenv.AsRoot), with a tmpfs of its own over /root.
func TestRootCommandsSeeTheirProgramsNotRootsSecrets(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	if !testenv.AsRoot(t) {
		return
	}
	secretDir, err := os.MkdirTemp("/root", ".toolgate-secret-")
	if err != nil && testenv.InUserNS() {
		// The machine's root owns /root; the namespace's own mounts
		// may cover it.
		if err := unix.Mount("tmpfs", "/root", "tmpfs", 0, "mode=0700"); err != nil {
			t.Fatalf("tmpfs over /root in the test's mount namespace: %v", err)
		}
		secretDir, err = os.MkdirTemp("/root", ".toolgate-secret-")
	}
	if err != nil {
		testenv.Missing(t, "root cannot write /root ("+err.Error()+"): the test puts a secret there; run it where root's home is writable")
	}
	t.Cleanup(func() { os.RemoveAll(secretDir) })
	if err := os.WriteFile(filepath.Join(secretDir, "key"), []byte("s3cr3t"), 0o600); err != nil {
		t.Fatal(err)
	}
	binDir, err := os.MkdirTemp("/root", ".toolgate-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(binDir) })
	if err := os.WriteFile(filepath.Join(binDir, "toolgate-hello"), []byte("#!/bin/sh\necho hello-from-root-path\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", binDir+":"+os.Getenv("PATH"))
	p := newPipeline(t, bash.Config{Workspace: newWorkspace(t, 0), Sandbox: bash.ModeRequire})
	out := mustRun(t, p, "id -u; toolgate-hello; cat "+filepath.Join(secretDir, "key")+" 2>/dev/null || echo hidden; cat /etc/shadow | wc -c")
	for _, want := range []string{"0\n", "hello-from-root-path", "hidden", "\n0\n"} {
		if !strings.Contains(out.Content, want) {
			t.Errorf("want %q in:\n%s", want, out.Content)
		}
	}
	if strings.Contains(out.Content, "s3cr3t") {
		t.Errorf("a root command read root's files:\n%s", out.Content)
	}
}

// TestOneProcessLimitRunsACommand: a call limited to one process runs a
// command that starts nothing (without a sandbox, bash alone): whatever
// thread of the worker starts it in its cgroups is not counted against
// the call's limit.
func TestOneProcessLimitRunsACommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("per-call cgroups of this kind need a root worker")
	}
	p := newPipeline(t, bash.Config{Workspace: newWorkspace(t, testUID), Sandbox: bash.ModeOff, Limits: bash.Limits{Processes: 1}})
	for i := range 20 {
		out := mustRun(t, p, "echo ok")
		if got := strings.TrimSpace(md[string](t, out, "stdout")); got != "ok" {
			t.Fatalf("call %d with a one-process limit: stdout %q: %s", i, got, out.Content)
		}
	}
}
