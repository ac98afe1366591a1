package bash_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// The boundary: what the gate judged of a call is the access the kernel
// grants it. Each case here has the real gate judge one command and then
// runs another in its place, as a misprediction of the gate would (the
// gate's judgement of bash is a prediction): what the command really does
// beyond what was judged must fail. The effects are asserted from
// outside: a secret never printed, a marker never written, a file never
// changed.

// boundaryPolicy lets every command run and writes happen, and denies
// reading *.pem files.
const boundaryPolicy = `version: 1
default: ask
tools:
  read: { action: allow, constraints: { denied_paths: ["**/*.pem"] } }
  write: allow
  bash: allow
`

// mispredicted is gate with the judgement of judged given to a call that
// runs ran instead (judged itself when ran is empty).
func mispredicted(gate policy.Evaluator, judged, ran string) policy.Evaluator {
	return policy.EvaluatorFunc(func(ctx context.Context, req policy.Request) policy.Decision {
		req.Arguments = maps.Clone(req.Arguments)
		req.Arguments["command"] = judged
		d := gate.Evaluate(ctx, req)
		if ran != "" {
			d.Command = ran
		}
		return d
	})
}

// boundarySecret is the content of files a call must never print.
const boundarySecret = "BOUNDARY-SECRET-5e1f"

func TestBoundaryGrantsWhatWasJudged(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	testenv.LookPath(t, "git", "git")
	// Outside the workspace, readable by anyone, in a place the old
	// sandbox showed (the whole root, read-only).
	outside, err := os.MkdirTemp("/var/tmp", "toolgate-boundary-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(outside) })
	if err := os.Chmod(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(outside, "secret"), boundarySecret)

	pol, _, err := policy.Parse([]byte(boundaryPolicy), "test")
	if err != nil {
		t.Fatal(err)
	}
	gate := policy.NewGate(pol)
	touch, err := exec.LookPath("touch")
	if err != nil {
		t.Fatal(err)
	}
	if touch, err = filepath.EvalSymlinks(touch); err != nil {
		t.Fatal(err)
	}
	loader := "ld.so"
	if _, err := exec.LookPath(loader); err != nil {
		loader = "/lib64/ld-linux-x86-64.so.2"
	}
	for _, tt := range []boundaryTest{
		{name: "a file outside the view", judged: "cat notes.txt", ran: "cat " + outside + "/secret", leak: boundarySecret},
		{name: "a file outside the view by cd", judged: "cat notes.txt", ran: "cd " + outside + " && cat secret", leak: boundarySecret},
		{name: "a denied file in the workspace", judged: "cat notes.txt", ran: "cat key.pem", leak: boundarySecret},
		{name: "a denied file by a link", judged: "cat notes.txt", ran: "cat link-to-key", leak: boundarySecret},
		{name: "a denied file in a subdirectory", judged: "cat notes.txt", ran: "cat sub/deep.pem", leak: boundarySecret},
		{name: "a write by a call judged to write nothing", judged: "cat notes.txt", ran: "cat notes.txt; echo x > marker", marker: "marker", want: "notes"},
		{name: "a write beside the one judged", judged: "cat notes.txt > out.txt", ran: "cat notes.txt > out.txt; echo x > marker; cat out.txt", marker: "marker", want: "notes"},
		{name: "a write into the repository's config", judged: "cat notes.txt > out.txt", ran: "printf '[core]\\n\\tfsmonitor = touch marker\\n' >> .git/config", marker: "marker"},
		{name: "the config written by a call that may write the workspace", judged: "cp notes.txt copy.txt", ran: "cp notes.txt copy.txt; printf '[core]\\n\\tfsmonitor = x\\n' >> .git/config; echo y > .git/hooks/pre-commit"},
		{name: "the repository renamed away", judged: "cp notes.txt copy.txt; mv copy.txt c2.txt", ran: "mv .git old-git; cp -r old-git .git; printf '[core]\\n\\tfsmonitor = x\\n' >> .git/config"},
		{name: "attributes replaced", judged: "cp notes.txt copy.txt; mv copy.txt c2.txt; mkdir d", ran: "cp notes.txt .gitattributes; mv sub moved; mkdir sub; echo '* filter=x' > sub/.gitattributes"},
		// Execution: a call naming no program runs the shell alone; one
		// naming git runs git and its helpers, and nothing else.
		{name: "a program run by a call that names none", judged: "cd sub", ran: "cd sub; touch /tmp/x && echo touch-ran", leak: "touch-ran"},
		{name: "a program run beside git", judged: "git status --short; cp notes.txt copy.txt", ran: "git status --short; touch marker", marker: "marker", want: "notes.txt"},
		// The loader is a system program the gate resolves; the file it
		// maps is one the agent wrote (evil, a copy of touch, not
		// executable).
		{name: "the loader maps a program written in the workspace", judged: loader + " ./evil marker", marker: "marker"},
		{name: "the loader maps a program written in /tmp", judged: "cp evil copy; " + loader + " ./evil marker", ran: "cp evil /tmp/evil; " + loader + " /tmp/evil marker", marker: "marker"},
		{name: "the loader maps a program written in /dev/shm", judged: "cp evil copy; " + loader + " ./evil marker", ran: "cp evil /dev/shm/evil; " + loader + " /dev/shm/evil marker", marker: "marker"},
	} {
		for _, prepared := range []bool{false, true} {
			name := tt.name
			if prepared {
				name += " (prepared sandbox)"
			}
			t.Run(name, func(t *testing.T) { boundaryCase(t, gate, outside, touch, prepared, tt) })
		}
	}
}

// boundaryTest is a case of TestBoundaryGrantsWhatWasJudged.
type boundaryTest struct {
	name, judged, ran string
	// leak must not be printed; marker must not exist after; the
	// repository's config must not change; want must be printed.
	// (Every case also checks the protected files after.)
	leak, marker, want string
}

// boundaryCase is one case of TestBoundaryGrantsWhatWasJudged; prepared:
// its call runs in a sandbox prepared ahead, after two calls of the same
// judgement prepared it.
func boundaryCase(t *testing.T, gate policy.Evaluator, outside, touch string, prepared bool, tt boundaryTest) {
	ws := newWorkspace(t, testUID)
	writeTestFile(t, filepath.Join(ws, "notes.txt"), "notes\n")
	writeTestFile(t, filepath.Join(ws, "key.pem"), boundarySecret)
	writeTestFile(t, filepath.Join(ws, "sub", "deep.pem"), boundarySecret)
	writeTestFile(t, filepath.Join(ws, "sub", ".gitattributes"), "*.txt text\n")
	writeTestFile(t, filepath.Join(ws, ".gitattributes"), "*.go text\n")
	elf, err := os.ReadFile(touch)
	if err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(ws, "evil"), string(elf))
	if err := os.Symlink("key.pem", filepath.Join(ws, "link-to-key")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "init", "-q", ws).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	chownTree(t, ws, testUID)
	config := readTestFile(t, filepath.Join(ws, ".git", "config"))
	attrs := readTestFile(t, filepath.Join(ws, "sub", ".gitattributes"))
	var tool *tools.Tool
	used, settle := func() int { return 0 }, func() {}
	if prepared {
		tool, used, settle = bash.NewPrepared(t, bash.Config{Workspace: ws, Sandbox: bash.ModeRequire})
	} else if tool, err = bash.New(bash.Config{Workspace: ws, Sandbox: bash.ModeRequire}); err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	if err := reg.Register(tool); err != nil {
		t.Fatal(err)
	}
	p := tools.NewPipeline(reg, tools.WithWorkspace(ws), tools.WithGate(mispredicted(gate, tt.judged, tt.ran)))
	var prior string
	if prepared {
		// The second call of a view prepares sandboxes for it; the
		// third runs in one. All are held.
		for range 2 {
			out, err := run(context.Background(), t, p, map[string]any{"command": tt.judged})
			if err != nil {
				t.Fatalf("%s: %v", tt.ran, err)
			}
			prior += md[string](t, out, "stdout") + md[string](t, out, "stderr")
		}
		settle()
	}
	before := used()
	out, err := run(context.Background(), t, p, map[string]any{"command": tt.judged})
	if err != nil {
		t.Fatalf("%s: %v", tt.ran, err)
	}
	if prepared && used() == before {
		t.Logf("the second call did not run in a prepared sandbox: the first changed its view")
	}
	stdout, stderr := md[string](t, out, "stdout"), md[string](t, out, "stderr")
	if tt.leak != "" && strings.Contains(prior, tt.leak) {
		t.Errorf("%s printed %q:\n%s", tt.ran, tt.leak, prior)
	}
	if exec, _ := out.Metadata["exec"].(string); strings.Contains(tt.name, "loader") && strings.Contains(exec, "not noexec") {
		t.Skipf("this machine refuses the remount: %s", exec)
	}
	t.Logf("%s: %q %q", tt.ran, stdout, stderr)
	if tt.leak != "" && strings.Contains(stdout+stderr, tt.leak) {
		t.Errorf("%s printed %q:\n%s%s", tt.ran, tt.leak, stdout, stderr)
	}
	if tt.want != "" && !strings.Contains(stdout, tt.want) {
		t.Errorf("%s: stdout %q lacks %q (stderr %q): what was judged must still work", tt.ran, stdout, tt.want, stderr)
	}
	if tt.marker != "" {
		if _, err := os.Lstat(filepath.Join(ws, tt.marker)); err == nil {
			t.Errorf("%s wrote %s", tt.ran, tt.marker)
		}
	}
	if got := readTestFile(t, filepath.Join(ws, ".git", "config")); got != config {
		t.Errorf("%s changed .git/config:\n%s", tt.ran, got)
	}
	if _, err := os.Lstat(filepath.Join(ws, ".git", "hooks", "pre-commit")); err == nil {
		t.Errorf("%s wrote a hook", tt.ran)
	}
	if got := readTestFile(t, filepath.Join(ws, "sub", ".gitattributes")); got != attrs {
		t.Errorf("%s changed sub/.gitattributes: %q", tt.ran, got)
	}
	if got := readTestFile(t, filepath.Join(ws, ".gitattributes")); got != "*.go text\n" {
		t.Errorf("%s changed .gitattributes: %q", tt.ran, got)
	}
}

func writeTestFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readTestFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// TestBoundaryAmendmentIsAnApproval: a call an amendment allowed (a
// person's standing approval; the gate resolved nothing of it) runs as an
// approved one: unrestricted, with the workspace and its protected files
// writable.
func TestBoundaryAmendmentIsAnApproval(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	ws := newWorkspace(t, testUID)
	writeTestFile(t, filepath.Join(ws, ".npmrc"), "a=1\n")
	chownTree(t, ws, testUID)
	tool, err := bash.New(bash.Config{Workspace: ws, Sandbox: bash.ModeRequire})
	if err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	if err := reg.Register(tool); err != nil {
		t.Fatal(err)
	}
	const command = "touch ran && echo b=2 >> .npmrc"
	gate := policy.EvaluatorFunc(func(context.Context, policy.Request) policy.Decision {
		return policy.Decision{Action: policy.Allow, Rule: "amendments[a1]", Rendered: true, Command: command}
	})
	p := tools.NewPipeline(reg, tools.WithWorkspace(ws), tools.WithGate(gate))
	out, err := run(context.Background(), t, p, map[string]any{"command": command})
	if err != nil || out.IsError {
		t.Fatalf("%v %+v", err, out)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err != nil {
		t.Errorf("the amended call did not run touch: %v", err)
	}
	if got := readTestFile(t, filepath.Join(ws, ".npmrc")); got != "a=1\nb=2\n" {
		t.Errorf(".npmrc = %q: the amended call could not write it", got)
	}
	if md[string](t, out, "exec") != "unrestricted: allowed by an amendment" {
		t.Errorf("exec metadata %q", out.Metadata["exec"])
	}
}

// TestBoundaryCallsAppendToOneNewFile: calls judged to write one named
// file that does not exist yet each have it made before the sandbox binds
// it writable; calls that run at once (a fleet's agents appending to one
// log) must all write it, whichever of them made it.
func TestBoundaryCallsAppendToOneNewFile(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	pol, _, err := policy.Parse([]byte(boundaryPolicy), "test")
	if err != nil {
		t.Fatal(err)
	}
	ws := newWorkspace(t, testUID)
	tool, err := bash.New(bash.Config{Workspace: ws, Sandbox: bash.ModeRequire})
	if err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	if err := reg.Register(tool); err != nil {
		t.Fatal(err)
	}
	p := tools.NewPipeline(reg, tools.WithWorkspace(ws), tools.WithGate(policy.NewGate(pol)))
	const calls = 32
	errs := make(chan string, calls)
	for i := range calls {
		go func() {
			out, err := run(context.Background(), t, p, map[string]any{"command": fmt.Sprintf("echo %d >> runs.log", i)})
			switch {
			case err != nil:
				errs <- err.Error()
			case out.IsError:
				errs <- md[string](t, out, "stderr")
			case md[string](t, out, "write") != "named":
				errs <- "judged to write " + md[string](t, out, "write") + ", not the named file"
			default:
				errs <- ""
			}
		}()
	}
	for range calls {
		if e := testenv.Recv(t, errs, "a call's end"); e != "" {
			t.Errorf("a call failed: %s", e)
		}
	}
	if got := strings.Count(readTestFile(t, filepath.Join(ws, "runs.log")), "\n"); got != calls {
		t.Errorf("runs.log has %d lines, want %d", got, calls)
	}
}
