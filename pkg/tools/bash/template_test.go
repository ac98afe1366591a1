//go:build linux

package bash_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// inTemplate, when set, is what newPipeline returns for a sandboxed tool
// (TestSandboxSuiteInATemplate).
var inTemplate func(t *testing.T, cfg bash.Config) *tools.Pipeline

// templated is a pipeline over the bash tool of cfg whose calls are
// served by a sandbox template, and the tool's view of its templates.
// The template of an ungated call's view is started (two calls of true)
// before it returns; when t ends, a call must have run in it.
func templated(t *testing.T, cfg bash.Config) (*tools.Pipeline, *bash.Templated) {
	t.Helper()
	testenv.LookPath(t, "bwrap", "bubblewrap")
	old := bash.SetSandboxInit(buildSandboxInit(t))
	t.Cleanup(func() { bash.SetSandboxInit(old) })
	s := bash.NewTemplated(t, cfg)
	reg := tools.NewRegistry()
	if err := reg.Register(s.Tool); err != nil {
		t.Fatal(err)
	}
	p := tools.NewPipeline(reg, tools.WithWorkspace(cfg.Workspace))
	mustRun(t, p, "true")
	mustRun(t, p, "true") // the view's second call starts its template
	s.Settle()
	if n := len(s.Pids()); n != 1 {
		t.Fatalf("%d templates after two calls of one view, want 1", n)
	}
	before := s.Used()
	t.Cleanup(func() {
		if s.Used() == before {
			t.Errorf("no call ran in the sandbox template")
		}
	})
	return p, s
}

// templatePipeline is templated's pipeline.
func templatePipeline(t *testing.T, cfg bash.Config) *tools.Pipeline {
	t.Helper()
	p, _ := templated(t, cfg)
	return p
}

// TestSandboxSuiteInATemplate runs the package's tests of what a sandbox
// holds with every sandboxed call served by a sandbox template: the
// effects they look for (writes, privileges, limits, the filter, kills,
// cgroups) are the same.
func TestSandboxSuiteInATemplate(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	inTemplate = templatePipeline
	defer func() { inTemplate = nil }()
	for _, tt := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"ExitCodeStdoutAndStderr", TestExitCodeStdoutAndStderr},
		{"CommandsNeverHoldPrivileges", TestCommandsNeverHoldPrivileges},
		{"EnvironmentIsScrubbed", TestEnvironmentIsScrubbed},
		{"CancelKillsTheWholeTree", TestCancelKillsTheWholeTree},
		{"TimeoutKillsGrandchildren", TestTimeoutKillsGrandchildren},
		{"BackgroundProcessesDoNotHangOrOutliveTheCall", TestBackgroundProcessesDoNotHangOrOutliveTheCall},
		{"SandboxConfinesWrites", TestSandboxConfinesWrites},
		{"SandboxHidesConfiguredDirectories", TestSandboxHidesConfiguredDirectories},
		{"CwdStaysInTheWorkspace", TestCwdStaysInTheWorkspace},
		{"ProcessesArePerCallBounded", TestProcessesArePerCallBounded},
		{"CommandStartsInItsCgroups", TestCommandStartsInItsCgroups},
		{"SeccompDeniesKernelAttackSurface", TestSeccompDeniesKernelAttackSurface},
		{"LimitsByTheirEffect", TestLimitsByTheirEffect},
		{"MemoryIsPerCallBounded", TestMemoryIsPerCallBounded},
		{"CommonProgramsWorkUnderTheFilter", TestCommonProgramsWorkUnderTheFilter},
		{"RootCommandsSeeTheirProgramsNotRootsSecrets", TestRootCommandsSeeTheirProgramsNotRootsSecrets},
	} {
		t.Run(tt.name, tt.fn)
	}
}

// TestTemplateLeavesNothingToTheNext: a call served by a template finds
// nothing of the call before it in the same template: not the files it
// left in /tmp, /dev/shm or its home, not the processes it left running
// (in the background, in a session of their own, under nohup: gone from
// the host before the call's result is back), and the template is the
// same process throughout.
func TestTemplateLeavesNothingToTheNext(t *testing.T) {
	ws := newWorkspace(t, testUID)
	p, s := templated(t, bash.Config{Workspace: ws, Sandbox: bash.ModeRequire})
	pids := s.Pids()
	tag := sleepArg()
	leave := "echo x > /tmp/left-tmp; echo x > /dev/shm/left-shm; echo x > $HOME/left-home; " +
		"(sleep " + tag + " &); setsid sleep " + tag + " & nohup sleep " + tag + " >/dev/null 2>&1 & echo left > in-ws"
	look := "ls -a /tmp /dev/shm $HOME; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done"
	for i := range 3 {
		before := s.Used()
		mustRun(t, p, leave)
		if got := readTestFile(t, filepath.Join(ws, "in-ws")); got != "left\n" {
			t.Fatalf("call %d wrote %q to the workspace", i, got)
		}
		if n := hostProcs(t, tag); n != 0 {
			t.Errorf("call %d: %d of its processes still run on the host after it ended", i, n)
		}
		out := mustRun(t, p, look).Content
		if s.Used() != before+2 {
			t.Errorf("call %d: %d of 2 calls ran in the template", i, s.Used()-before)
		}
		for _, leak := range []string{"left-tmp", "left-shm", "left-home", "sleep " + tag} {
			if strings.Contains(out, leak) {
				t.Errorf("call %d after one that left %s sees it:\n%s", i, leak, out)
			}
		}
	}
	if got := s.Pids(); !slices.Equal(got, pids) {
		t.Errorf("the template changed from %v to %v", pids, got)
	}
}

// TestTemplateCallsOfTwoAgentsConcurrently: two agents' calls served at
// once by the same template never see each other's files or processes,
// and one that kills every process it can (kill -9 -1) kills nothing of
// the other's nor the template.
func TestTemplateCallsOfTwoAgentsConcurrently(t *testing.T) {
	ws := newWorkspace(t, testUID)
	p, s := templated(t, bash.Config{Workspace: ws, Sandbox: bash.ModeRequire})
	pids := s.Pids()
	before := s.Used()
	outs := twoAgents(t, p, func(i int) string {
		if i == 0 {
			return "kill -9 -1; echo killed-all"
		}
		return "sleep 1; echo b-survived"
	})
	if s.Used() != before+2 {
		t.Errorf("%d of 2 calls ran in the template", s.Used()-before)
	}
	if !strings.Contains(outs[1], "b-survived") {
		t.Errorf("the call beside one that killed all it could did not finish:\n%s", outs[1])
	}
	if got := s.Pids(); !slices.Equal(got, pids) {
		t.Errorf("the template changed from %v to %v", pids, got)
	}
	mustRun(t, p, "true")
}

// TestTemplateCannotBeSeenOrSignalled: a call sees only its own
// processes (its command is PID 2 of its namespace, beside the call's
// init), cannot signal the template by any pid it can name, and holds no
// descriptor but its standard streams.
func TestTemplateCannotBeSeenOrSignalled(t *testing.T) {
	ws := newWorkspace(t, testUID)
	p, s := templated(t, bash.Config{Workspace: ws, Sandbox: bash.ModeRequire})
	pids := s.Pids()
	out := mustRun(t, p, "echo self=$$; ls /proc | grep '^[0-9]' | tr '\\n' ' '; echo; ls /proc/$$/fd | tr '\\n' ' '; echo; "+
		"for p in $(seq 1 4096); do [ $p = $$ ] || { kill -9 $p 2>/dev/null && echo signalled=$p; }; done; kill -9 -1; echo after").Content
	t.Logf("%s", out)
	// PID 1 is the call's init; the shell, the ls and the subshells of
	// its pipeline are all there is.
	if !strings.Contains(out, "self=2\n") || !strings.Contains(out, "after") {
		t.Errorf("the call's shell is not PID 2 of its namespace, or it was killed:\n%s", out)
	}
	if !strings.Contains(out, "\n0 1 2 \n") {
		t.Errorf("the call's shell holds descriptors beyond its streams:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "signalled="); ok && v != "1" {
			t.Errorf("the call signalled pid %s, not its own", v)
		}
	}
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
			t.Errorf("the template %d is gone after a call signalled all it could: %v", pid, err)
		}
	}
	before := s.Used()
	mustRun(t, p, "true")
	if s.Used() != before+1 || !slices.Equal(s.Pids(), pids) {
		t.Errorf("the next call did not run in the same template (%v, now %v)", pids, s.Pids())
	}
}

// TestTemplateTimeoutKillsTheWholeCall: a call past its timeout is killed
// with everything it started, in its session or not, and the template
// serves the next call.
func TestTemplateTimeoutKillsTheWholeCall(t *testing.T) {
	ws := newWorkspace(t, testUID)
	p, s := templated(t, bash.Config{Workspace: ws, Sandbox: bash.ModeRequire})
	tag := sleepArg()
	_, err := run(context.Background(), t, p, map[string]any{"timeout": 1500,
		"command": "setsid sleep " + tag + " & nohup sleep " + tag + " >/dev/null 2>&1 & (sleep " + tag + " &); sleep " + tag})
	if !errors.Is(err, tools.ErrTimeout) {
		t.Fatalf("err = %v, want a timeout", err)
	}
	if n := hostProcs(t, tag); n != 0 {
		t.Errorf("%d of the call's processes still run on the host after its timeout", n)
	}
	before := s.Used()
	mustRun(t, p, "true")
	if s.Used() != before+1 {
		t.Errorf("the next call did not run in the template")
	}
}

// TestTemplateRestrictsWhatACallRuns: a call the gate resolved to its
// programs runs only those in a template (Landlock on the call's own
// thread: a program not named never runs, its marker never appears), an
// unrestricted call of another view still cannot make namespaces or
// mounts (the seccomp filter), and neither restriction outlives its call.
func TestTemplateRestrictsWhatACallRuns(t *testing.T) {
	ws := newWorkspace(t, testUID)
	p, s := templated(t, bash.Config{Workspace: ws, Sandbox: bash.ModeRequire})
	truePath, err := exec.LookPath("true")
	if err == nil {
		truePath, err = filepath.EvalSymlinks(truePath)
	}
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(ws, "marker")
	command := "true; touch " + marker + "; echo rc=$?"
	// The tool itself, as a gate that resolved the call's programs
	// leaves it (the pipeline has no gate to).
	d := &policy.Decision{Action: policy.Allow, Rule: "test", Rendered: true, Command: command, Programs: []string{truePath}}
	raw, _ := json.Marshal(map[string]any{"command": command})
	for i := range 3 { // the third in the restricted view's template
		before := s.Used()
		out, err := s.Tool.Handler.Handle(context.Background(), &tools.Call{ID: "restricted", Name: "bash", Arguments: raw, Decision: d})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("call %d (template %v): %s", i, s.Used() > before, out.Content)
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("call %d ran touch, which its allowlist does not name", i)
		}
		if i == 2 && s.Used() == before {
			t.Errorf("the restricted view's third call did not run in a template")
		}
	}
	out := mustRun(t, p, "unshare -rm true && echo unshared; unshare -n true && echo unshared-net; "+
		"mkdir -p /tmp/m && mount -t tmpfs none /tmp/m && echo mounted; touch "+marker+" && echo touched").Content
	for _, bad := range []string{"unshared", "mounted"} {
		if strings.Contains(out, bad+"\n") {
			t.Errorf("an unrestricted call in a template %s:\n%s", bad, out)
		}
	}
	if !strings.Contains(out, "touched") {
		t.Errorf("an unrestricted call after restricted ones could not run touch:\n%s", out)
	}
}

// TestTemplateServesConcurrentCallsUnderASmallProcessLimit: a call's
// process limit bounds each call, not the template, whose threads (two
// per call in flight) live in cgroups of its own: calls at once in one
// template all run, each within its limit.
func TestTemplateServesConcurrentCallsUnderASmallProcessLimit(t *testing.T) {
	testenv.LookPath(t, "perl", "perl-base")
	ws := newWorkspace(t, testUID)
	p, s := templated(t, bash.Config{Workspace: ws, Sandbox: bash.ModeRequire, Limits: bash.Limits{Processes: 3}})
	before := s.Used()
	outs := make(chan string, 6)
	for range 6 {
		go func() {
			out, err := run(context.Background(), t, p, map[string]any{"command": "sleep 0.3; " + forkLoop(10)})
			if err != nil {
				outs <- err.Error()
				return
			}
			outs <- out.Content
		}()
	}
	for range 6 {
		out := <-outs
		_, v, ok := strings.Cut(out, "started=")
		n, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(v, "\n", 2)[0]))
		if !ok || err != nil || n >= 3 {
			t.Errorf("a call under a limit of 3 processes: %s", out)
		}
	}
	if s.Used() != before+6 {
		t.Errorf("%d of 6 calls ran in the template", s.Used()-before)
	}
}
