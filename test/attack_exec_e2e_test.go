package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// These tests attack the execution half of a real worker (embedded NATS,
// the built-in tools, bubblewrap) the way an agent would: the gate lets
// the command run, and what must hold is what the command can do. Each
// asserts that the attack's side effect (a marker file, processes on the
// host, a faked line) never happened.

// permissivePolicy lets every command and file write run without a
// person, so that the attacks reach the sandbox whatever the shell
// judgement would say; the built-in protections still apply.
const permissivePolicy = `version: 1
default: ask
tools:
  read: allow
  ls: allow
  glob: allow
  grep: allow
  write: allow
  edit: allow
  bash: allow
`

// attackWorker starts a worker that requires bubblewrap, on a workspace
// owned by the test's user (root in a container: commands then run as
// root without any capability).
func attackWorker(t *testing.T, policy string, mods ...func(*daemon.Options)) (*process, *client.Client) {
	t.Helper()
	testenv.LookPath(t, "bwrap", "bubblewrap")
	ws := newWorkspace(t)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, ws, func(o *daemon.Options) {
		o.Sandbox = bash.ModeRequire
		o.PolicyFile = pol
		for _, m := range mods {
			m(o)
		}
	})
	return p, p.client(t, "attacker")
}

// runBash runs command through the bus and requires that it ran.
func runBash(t *testing.T, c *client.Client, command string, timeoutMS int) *events.ResultData {
	t.Helper()
	args, _ := json.Marshal(map[string]any{"command": command, "timeout": timeoutMS})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var asked atomic.Pointer[events.ResultData]
	r, err := c.Call(ctx, "bash", args, client.OnPending(func(d events.ResultData) { asked.Store(&d); cancel() }))
	if a := asked.Load(); a != nil {
		t.Fatalf("%s: the gate asks a person (%+v); the attack must be one the gate lets run", command, a.Decision)
	}
	if err != nil {
		t.Fatalf("%s: %v", command, err)
	}
	switch r.Status {
	case events.StatusOK, events.StatusError, events.StatusTimeout:
	default:
		t.Fatalf("%s did not run: %s %s %+v", command, r.Status, r.Output, r.Decision)
	}
	return r
}

func noMarker(t *testing.T, ws, marker, what string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(ws, marker)); err == nil {
		t.Fatalf("%s: the attack's marker %s exists", what, marker)
	}
}

func hostGit(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// TestAttackGitRunsPlantedPrograms (class 3): configuration in the
// repository names programs for a diff driver, a textconv, a clean filter
// and fsmonitor; the agent then runs git commands the gate allows, and
// one it asks about from a Makefile. None of the programs runs, and git still shows the change. Writing the
// code-bearing files through the write tool needs a person.
func TestAttackGitRunsPlantedPrograms(t *testing.T) {
	testenv.LookPath(t, "git", "git")
	p, c := attackWorker(t, permissivePolicy)
	ws := p.ws
	hostGit(t, ws, "-c", "init.defaultBranch=main", "init", "-q", ".")
	writeFile(t, filepath.Join(ws, "f.txt"), "one\ntwo\n")
	hostGit(t, ws, "add", "f.txt")
	hostGit(t, ws, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "first")
	writeFile(t, filepath.Join(ws, "f.txt"), "one\nTHREE\n")
	const m = "PWNED-GIT"
	run := "touch " + filepath.Join(ws, m)
	cfg, _ := os.ReadFile(filepath.Join(ws, ".git", "config"))
	cfg = append(cfg, []byte(fmt.Sprintf("[core]\n\tfsmonitor = \"%s; false\"\n[diff \"x\"]\n\tcommand = \"%s; true\"\n\ttextconv = \"%s; cat\"\n"+
		"[filter \"x\"]\n\tclean = \"%s; cat\"\n[include]\n\tpath = ../inc.cfg\n", run, run, run, run))...)
	writeFile(t, filepath.Join(ws, ".git", "config"), string(cfg))
	writeFile(t, filepath.Join(ws, "inc.cfg"), "[core]\n\tpager = "+run+"\n")
	writeFile(t, filepath.Join(ws, ".gitattributes"), "* diff=x filter=x\n")
	for _, cmd := range []string{"git diff", "git log -p", "git show HEAD", "git blame f.txt", "git status"} {
		r := runBash(t, c, cmd, 60000)
		noMarker(t, ws, m, cmd)
		if cmd == "git diff" && !strings.Contains(r.Output, "+THREE") {
			t.Errorf("git diff does not show the change (%s):\n%s", r.Status, r.Output)
		}
	}
	// The gate asks about --textconv itself; run from a Makefile, which
	// it does not read, git still runs no textconv program.
	const textconv = "git grep --textconv one"
	if !askedPerson(t, c, "bash", map[string]any{"command": textconv}) {
		t.Errorf("%s was not parked for a person", textconv)
	}
	testenv.LookPath(t, "make", "make")
	writeFile(t, filepath.Join(ws, "textconv.mk"), "all:\n\t-"+textconv+"\n")
	r := runBash(t, c, "make -s -f textconv.mk", 60000)
	noMarker(t, ws, m, textconv+" from a Makefile")
	if !strings.Contains(r.Output, "f.txt:one") {
		t.Errorf("%s from a Makefile did not search (%s):\n%s", textconv, r.Status, r.Output)
	}
	// Writing code-bearing git files through a tool needs a person.
	for _, path := range []string{".git/hooks/pre-commit", "sub/.gitattributes", ".gitmodules", ".git/info/attributes"} {
		if !askedPerson(t, c, "write", map[string]any{"path": path, "content": "* diff=x\n"}) {
			t.Errorf("write %s was not parked for a person", path)
		}
		if _, err := os.Stat(filepath.Join(ws, path)); err == nil {
			t.Errorf("write %s happened without a person", path)
		}
	}
}

// askedPerson reports whether the call was parked for a person; it does not
// wait for one.
func askedPerson(t *testing.T, c *client.Client, tool string, args map[string]any) bool {
	t.Helper()
	b, _ := json.Marshal(args)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var pending atomic.Bool
	r, err := c.Call(ctx, tool, b, client.OnPending(func(events.ResultData) { pending.Store(true); cancel() }))
	if !pending.Load() {
		t.Logf("%s %s: %v %+v", tool, b, err, r)
	}
	return pending.Load()
}

// TestAttackDotfilesInTheWorkspace (class 4): the agent writes shell
// start-up files, a git config and a lesskey where HOME used to be, then
// runs login and interactive shells, git and less through a Makefile.
func TestAttackDotfilesInTheWorkspace(t *testing.T) {
	p, c := attackWorker(t, permissivePolicy)
	ws := p.ws
	const m = "PWNED-DOTFILE"
	run := "touch " + filepath.Join(ws, m)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for path, content := range map[string]string{
		".bashrc": run + "\n", ".bash_profile": run + "\n", ".profile": run + "\n", ".bash_login": run + "\n",
		".gitconfig": "[core]\n\tfsmonitor = \"" + run + "; false\"\n", ".lesskey": "#env\nLESSOPEN=|" + run + " %s\n",
	} {
		args, _ := json.Marshal(map[string]any{"path": path, "content": content})
		if r, err := c.Call(ctx, "write", args); err != nil || r.Status != events.StatusOK {
			t.Fatalf("write %s: %v %+v", path, err, r)
		}
	}
	// The gate asks about login shells and git init itself; a Makefile,
	// which it does not read, runs them all the same.
	cmds := []string{"bash -lc true", "sh -lc true", "bash -ic true", "git init -q x && git -C x status", "less .bashrc < /dev/null"}
	mk := ""
	for i, cmd := range cmds {
		mk += fmt.Sprintf("t%d:\n\t-%s\n", i, cmd)
	}
	writeFile(t, filepath.Join(ws, "Makefile"), mk)
	testenv.LookPath(t, "make", "make")
	for i, cmd := range cmds {
		runBash(t, c, fmt.Sprintf("make -s t%d", i), 60000)
		noMarker(t, ws, m, cmd)
	}
}

// TestAttackReadsTheInstallKeys: a command runs as a user who may own
// the state directory (an unprivileged worker's own user, or root in a
// container) and would print the account seed, with which any identity
// can be minted. The workspace's own Makefile reads it (the gate judges
// only the command line); the state and data directories are kept out of
// /tmp, which the sandbox already replaces. Nothing of them is visible.
func TestAttackReadsTheInstallKeys(t *testing.T) {
	base, err := os.MkdirTemp("/var/tmp", "toolgate-state-")
	if err != nil {
		t.Fatal("/var/tmp keeps the state directory outside the sandbox's /tmp:", err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	state, data := filepath.Join(base, "state"), filepath.Join(base, "data")
	t.Setenv(identity.EnvStateDir, state)
	p, c := attackWorker(t, permissivePolicy, func(o *daemon.Options) { o.DataDir = data })
	keys, err := filepath.Glob(filepath.Join(state, "keys", "*"))
	if err != nil || len(keys) == 0 {
		t.Fatalf("the worker made no keys under %s: %v", state, err)
	}
	if _, err := os.Stat(data); err != nil {
		t.Fatalf("the worker made no data directory: %v", err)
	}
	testenv.LookPath(t, "make", "make")
	writeFile(t, filepath.Join(p.ws, "Makefile"), fmt.Sprintf("all:\n\t-ls -la %s %s > listing 2>&1\n\t-cat %s/keys/* > seeds 2>&1\n", state, data, state))
	runBash(t, c, "make -s", 60000)
	seed := regexp.MustCompile(`S[OAU][A-Z2-7]{50,}`)
	for f, leaked := range map[string]func([]byte) bool{
		"listing": func(b []byte) bool {
			return bytes.Contains(b, []byte("keys")) || bytes.Contains(b, []byte("jetstream"))
		},
		"seeds": seed.Match,
	} {
		got, err := os.ReadFile(filepath.Join(p.ws, f))
		if err != nil {
			t.Fatalf("the Makefile did not run: %v", err)
		}
		if leaked(got) {
			t.Fatalf("a command saw the install's state (%s):\n%s", f, got)
		}
	}
}

// TestAttackForkBombAndKernelSurface (class 6): a loop forks sleeps until
// its timeout; the number of its processes on the host stays bounded by
// the per-call limit, and none is left afterwards. Creating a user
// namespace, tracing a process and changing the personality fail.
func TestAttackForkBombAndKernelSurface(t *testing.T) {
	const limit = 200 // --bash-processes
	p, c := attackWorker(t, permissivePolicy, func(o *daemon.Options) { o.BashLimits.Processes = limit })
	tok := fmt.Sprintf("%d.%09d", 5000+rand.IntN(5000), rand.IntN(1e9))
	// Every process of the bomb is a sleep whose command line holds tok.
	count := func() int {
		n := 0
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err != nil {
				continue
			}
			b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err == nil && bytes.Contains(b, []byte(tok)) {
				n++
			}
		}
		return n
	}
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if n := int64(count()); n > peak.Load() {
				peak.Store(n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	r := runBash(t, c, "for i in $(seq 3000); do sleep "+tok+" & done; wait", 8000)
	close(stop)
	wg.Wait()
	t.Logf("fork bomb: status %s, at most %d of its processes seen on the host, processes_peak %v", r.Status, peak.Load(), r.Metadata["processes_peak"])
	if peak.Load() > limit {
		t.Errorf("a fork bomb held %d processes on the host, want at most %d", peak.Load(), limit)
	}
	if peak.Load() < 10 {
		t.Errorf("the fork bomb never ran (%d processes seen): %s", peak.Load(), r.Output)
	}
	for i := 0; count() > 0; i++ {
		if i > 500 {
			t.Fatalf("%d processes of the fork bomb outlived the call", count())
		}
		time.Sleep(10 * time.Millisecond)
	}

	const m = "PWNED-KERNEL"
	for _, cmd := range []string{
		"unshare -U sh -c 'touch " + m + "'",
		"unshare -r sh -c 'touch " + m + "'",
		"setarch x86_64 -R sh -c 'touch " + m + "'", // personality(ADDR_NO_RANDOMIZE)
	} {
		runBash(t, c, cmd, 60000)
		noMarker(t, p.ws, m, cmd)
	}
	// strace traces with ptrace: a trace would list the traced program's
	// system calls.
	if _, err := exec.LookPath("strace"); err == nil {
		r := runBash(t, c, "strace -o trace.txt true", 60000)
		if b, _ := os.ReadFile(filepath.Join(p.ws, "trace.txt")); bytes.Contains(b, []byte("execve")) {
			t.Errorf("strace traced a process:\n%s\n%s", r.Output, b)
		}
	}
}

// TestAttackHostileFileNames (class 8): file names that hold newlines,
// carriage returns and escape sequences try to fake result lines.
func TestAttackHostileFileNames(t *testing.T) {
	p, c := attackWorker(t, permissivePolicy)
	for _, n := range []string{"a\nFAKE-LINE.txt", "b\rFAKE-CR.txt", "c\x1b[2KFAKE-ESC.txt"} {
		writeFile(t, filepath.Join(p.ws, n), "needle\n")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for tool, args := range map[string]string{"glob": `{"pattern":"*"}`, "ls": `{}`, "grep": `{"pattern":"needle","output_mode":"content"}`} {
		r, err := c.Call(ctx, tool, json.RawMessage(args))
		if err != nil || r.Status != events.StatusOK {
			t.Fatalf("%s: %v %+v", tool, err, r)
		}
		for _, line := range strings.Split(r.Output, "\n") {
			if strings.HasPrefix(line, "FAKE") || strings.ContainsAny(line, "\r\x1b") {
				t.Errorf("%s: a file name faked the line %q:\n%s", tool, line, r.Output)
			}
		}
	}
}
