package toolctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/teststack"
	"github.com/toolgate/toolgate/internal/toolctl"
	"github.com/toolgate/toolgate/pkg/events"
)

// worker is a real worker (embedded nats-server, built-in tools) on a
// random port, with a workspace holding README.md.
type worker struct {
	url string
	ws  string
}

func startWorker(t *testing.T) *worker {
	t.Helper()
	ws := teststack.NewWorkspace(t)
	if err := os.WriteFile(filepath.Join(ws, "README.md"), []byte("one\ntwo\nthree\nfour\nfive\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w := teststack.StartWorker(t, ws, nil)
	t.Cleanup(func() {
		if err := w.Stop(); err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	return &worker{url: w.URL, ws: ws}
}

// run runs toolctl with args exactly as given (no flags added).
func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code = toolctl.Run(ctx, args, &o, &e)
	return o.String(), e.String(), code
}

// TestFlagsAnywhere: the flags of a command, and the global ones, work
// before and after the command's words; -- ends them.
func TestFlagsAnywhere(t *testing.T) {
	w := startWorker(t)
	nats := "--nats=" + w.url
	bad := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(bad, []byte("tools:\n  bash:\n    actoin: ask\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string // each must appear
		absent []string // none may appear
		stderr string
	}{
		{"README example: --json before the tool", []string{nats, "call", "--json", `{"path":"README.md","limit":3}`, "read"},
			toolctl.ExitOK, []string{"     3\tthree"}, []string{"four"}, ""},
		{"--json after the tool", []string{nats, "call", "read", "--json", `{"path":"README.md","limit":2}`},
			toolctl.ExitOK, []string{"     2\ttwo"}, []string{"three"}, ""},
		{"--json=value form", []string{nats, "call", "read", `--json={"path":"README.md","limit":1}`},
			toolctl.ExitOK, []string{"     1\tone"}, []string{"two"}, ""},
		{"flags between key=value words", []string{nats, "call", "read", "path=README.md", "--timeout", "30s", "limit=2", "--wait", "1m"},
			toolctl.ExitOK, []string{"     2\ttwo"}, []string{"three"}, ""},
		{"single-dash flags", []string{nats, "call", "-wait", "1m", "read", "path=README.md", "-timeout=30s", "offset=5"},
			toolctl.ExitOK, []string{"     5\tfive"}, []string{"four"}, ""},
		{"global flags after the command", []string{"call", "read", "path=README.md", "--nats", w.url, "--agent", "late-flags"},
			toolctl.ExitOK, []string{"     1\tone"}, nil, ""},
		{"global flags between the command and the tool", []string{"call", "--agent=mid", nats, "read", "path=README.md", "limit=1"},
			toolctl.ExitOK, []string{"     1\tone"}, nil, ""},
		{"the agent after the command is the one used", []string{nats, "call", "read", "path=README.md", "--result", "--agent", "agent-late"},
			toolctl.ExitOK, []string{`"agent": "agent-late"`}, nil, ""},
		{"bool flag before the tool", []string{nats, "call", "--result", "read", "path=README.md", "limit=1"},
			toolctl.ExitOK, []string{`"status": "ok"`}, nil, ""},
		{"-- ends the flags", []string{nats, "call", "--wait", "1m", "--", "read", "path=README.md", "limit=1"},
			toolctl.ExitOK, []string{"     1\tone"}, nil, ""},
		{"tools with the global flag after it", []string{"tools", nats},
			toolctl.ExitOK, []string{"read (read_file)"}, nil, ""},
		{"bad JSON names the JSON, not the tool", []string{nats, "call", "--json", `{"path":`, "read"},
			toolctl.ExitUsage, nil, nil, `--json is not valid JSON: {"path":`},
		{"both --json and key=value", []string{nats, "call", "read", "path=x", "--json", `{}`},
			toolctl.ExitUsage, nil, nil, "either as key=value or with --json"},
		{"unknown flag", []string{nats, "call", "read", "--bogus"},
			toolctl.ExitUsage, nil, nil, "flag provided but not defined: -bogus"},
		{"flag without its value", []string{nats, "call", "read", "--wait"},
			toolctl.ExitUsage, nil, nil, "flag needs an argument: -wait"},
		{"no tool", []string{nats, "call", "--wait", "1m"},
			toolctl.ExitUsage, nil, nil, "usage: toolctl call TOOL"},
		{"unknown command", []string{nats, "cal"},
			toolctl.ExitUsage, nil, nil, `unknown command "cal"`},
		{"a denied call exits 4 and says why", []string{nats, "call", "read", "path=../outside"},
			toolctl.ExitDenied, nil, nil, "status denied"},
		{"a failing call exits 1 and says why", []string{nats, "call", "read", "path=no-such-file"},
			toolctl.ExitFailed, nil, nil, "status error"},
		{"policy push names a misspelled key and what was meant", []string{"policy", "push", bad, nats},
			toolctl.ExitFailed, nil, nil, "line 3: tools.bash.actoin: unknown field actoin; did you mean action?"},
		{"--wait bounds the wait for a parked call", []string{nats, "call", "bash", "command=git push", "--wait", "200ms"},
			toolctl.ExitNoReach, nil, nil, "no result within --wait 200ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := run(t, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out, errOut)
			}
			for _, s := range tt.stdout {
				if !strings.Contains(out, s) {
					t.Errorf("stdout lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tt.absent {
				if strings.Contains(out, s) {
					t.Errorf("stdout has %q:\n%s", s, out)
				}
			}
			if !strings.Contains(errOut, tt.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.stderr, errOut)
			}
		})
	}
}

// TestTimeoutFlag: --timeout reaches the worker, wherever it is written.
func TestTimeoutFlag(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	w := startWorker(t)
	for _, args := range [][]string{
		{"call", "--timeout", "1s", "bash", "command=sleep 30", "--result"},
		{"call", "bash", "command=sleep 30", "--timeout=1s", "--result"},
	} {
		out, errOut, code := run(t, append([]string{"--nats", w.url}, args...)...)
		if code != toolctl.ExitFailed || !strings.Contains(out, `"status": "timeout"`) {
			t.Fatalf("%v: exit %d\n%s\n%s", args, code, out, errOut)
		}
	}
}

// TestHelpAndUsage: --help exits 0 with the usage on the terminal; a
// missing subcommand prints its usage and exits 2, each error once.
func TestHelpAndUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, toolctl.ExitOK, "usage: toolctl"},
		{[]string{"call", "--help"}, toolctl.ExitOK, "usage: toolctl call TOOL"},
		{[]string{"events", "-h"}, toolctl.ExitOK, "oldest first"},
		{[]string{"policy", "--help"}, toolctl.ExitOK, "policy push FILE"},
		{[]string{"policy", "help"}, toolctl.ExitOK, "policy amendments list | revoke ID"},
		{[]string{"policy"}, toolctl.ExitUsage, "policy lint FILE"},
		{[]string{"policy", "check", "--help"}, toolctl.ExitOK, "-tool string"},
		{[]string{"policy", "lint", "--help"}, toolctl.ExitOK, "usage: policy lint FILE"},
		{[]string{"policy", "push", "--help"}, toolctl.ExitOK, "usage: toolctl policy push [--creds FILE] FILE"},
		{[]string{"policy", "amendments"}, toolctl.ExitUsage, "policy amendments revoke ID"},
		{[]string{"policy", "amendments", "--help"}, toolctl.ExitOK, "policy amendments list"},
		{[]string{"policy", "amendments", "list", "--help"}, toolctl.ExitOK, "-json"},
		{[]string{"approvals"}, toolctl.ExitUsage, "approvals approve ID"},
		{[]string{"approvals", "--help"}, toolctl.ExitOK, "approvals reject  ID --reason TEXT"},
		{[]string{"approvals", "list", "--help"}, toolctl.ExitOK, "-approver string"},
		{[]string{"budgets", "extra"}, toolctl.ExitUsage, "usage: toolctl budgets"},
		{[]string{"audit", "--help"}, toolctl.ExitOK, "-since duration"},
		{[]string{"audit", "extra"}, toolctl.ExitUsage, "usage: toolctl audit"},
		{[]string{"cancel"}, toolctl.ExitUsage, "usage: toolctl cancel CALL_ID"},
		{[]string{"cancel", "a", "b"}, toolctl.ExitUsage, "usage: toolctl cancel CALL_ID"},
		{[]string{"policy", "push"}, toolctl.ExitUsage, "usage: toolctl policy push"},
		{[]string{"call"}, toolctl.ExitUsage, "usage: toolctl call TOOL"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, errOut, code := run(t, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out, errOut)
			}
			if all := out + errOut; !strings.Contains(all, tt.want) {
				t.Fatalf("output lacks %q:\n%s", tt.want, all)
			}
			if tt.code == toolctl.ExitOK && strings.Contains(errOut, "not defined") {
				t.Fatalf("help reported as an error:\n%s", errOut)
			}
		})
	}
}

// TestErrorsOnce: an error is printed once, not by two layers.
func TestErrorsOnce(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(bad, []byte("tools:\n  bash:\n    actoin: ask\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"policy", "lint", bad},
		{"policy", "check", "--policy", bad, "--tool", "read"},
		{"--nats", "nats://127.0.0.1:1", "call", "read", "path=x"},
		{"--nats", "nats://127.0.0.1:1", "policy", "push", bad},
		{"call", "read", "--bogus"},
		{"approvals", "list", "--token", "t", "--approver", "http://127.0.0.1:1"},
	} {
		out, errOut, code := run(t, args...)
		if code == toolctl.ExitOK {
			t.Fatalf("%v succeeded:\n%s", args, out)
		}
		if strings.Count(errOut, "http://127.0.0.1:1") > 1 {
			t.Errorf("%v names the URL more than once:\n%s", args, errOut)
		}
		for _, line := range strings.Split(strings.TrimSpace(errOut), "\n") {
			if line != "" && strings.Count(errOut, line) > 1 {
				t.Errorf("%v printed %q twice:\n%s", args, line, errOut)
			}
		}
	}
}

// TestDeniedCallSaysWhyOnce: a denied call's output says why; toolctl
// does not repeat it.
func TestDeniedCallSaysWhyOnce(t *testing.T) {
	w := startWorker(t)
	out, errOut, code := run(t, "--nats", w.url, "call", "read", "path=../outside")
	const why = "is outside the workspace"
	if code != toolctl.ExitDenied || strings.Count(out+errOut, why) != 1 || !strings.Contains(errOut, "status denied") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// TestEventsOldestFirst: events prints the stored events of every stream
// together, oldest first, the same way twice.
func TestEventsOldestFirst(t *testing.T) {
	w := startWorker(t)
	for _, args := range [][]string{
		{"call", "read", "path=README.md"},
		{"call", "ls"},
		{"call", "read", "path=../denied"},
		{"call", "grep", "pattern=three"},
	} {
		if _, errOut, code := run(t, append([]string{"--nats", w.url}, args...)...); code == toolctl.ExitNoReach || code == toolctl.ExitUsage {
			t.Fatalf("%v: %d %s", args, code, errOut)
		}
	}
	first, errOut, code := run(t, "events", "--json", "--nats", w.url)
	if code != toolctl.ExitOK {
		t.Fatalf("events: %d %s", code, errOut)
	}
	var prev time.Time
	types := map[string]int{}
	lines := strings.Split(strings.TrimSpace(first), "\n")
	for i, l := range lines {
		var e toolctl.EventLine
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("line %d: %v: %s", i+1, err, l)
		}
		if e.Time.Before(prev) {
			t.Fatalf("line %d (%s) is older than the line before (%s):\n%s", i+1, e.Time, prev, first)
		}
		prev = e.Time
		types[e.Type]++
	}
	// Four results and four audit records at least, from two streams.
	if types[events.TypeCallCompleted] < 4 || types[events.TypeCallAudited] < 4 {
		t.Fatalf("events lacks results or audit records: %v", types)
	}
	second, _, _ := run(t, "events", "--json", "--nats", w.url)
	if !strings.HasPrefix(second, first) {
		t.Fatalf("a second replay differs from the first:\n%s\n---\n%s", first, second)
	}
}

// TestPolicyCheckKeepsItsAgent: policy check has an --agent of its own
// (the agent judged); it is not taken as the global one.
func TestPolicyCheckKeepsItsAgent(t *testing.T) {
	const example = "../../deploy/policy.example.yaml"
	for _, tt := range []struct {
		agent, action string
	}{{"ci-7", "deny"}, {"dev-1", "allow"}} {
		out, errOut, code := run(t, "policy", "check", "--policy", example, "--tool", "write", "--args", `{"path":"notes.txt"}`, "--agent", tt.agent)
		if code != toolctl.ExitOK || !strings.Contains(out, `"action":"`+tt.action+`"`) {
			t.Errorf("agent %s: exit %d, want %s:\n%s%s", tt.agent, code, tt.action, out, errOut)
		}
	}
}

// lockedBuffer is written by a running command and read by the test,
// with a signal on each write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	ch chan struct{}
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ch != nil {
		close(l.ch)
		l.ch = nil
	}
	return l.b.Write(p)
}

// changed returns a channel closed at the next write.
func (l *lockedBuffer) changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ch == nil {
		l.ch = make(chan struct{})
	}
	return l.ch
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestEventsFollow: --follow prints what is stored, then a call made
// while it runs, and ends cleanly when interrupted.
func TestEventsFollow(t *testing.T) {
	w := startWorker(t)
	if _, errOut, code := run(t, "--nats", w.url, "call", "--id", "before-follow", "read", "path=README.md"); code != toolctl.ExitOK {
		t.Fatalf("call: %s", errOut)
	}
	var out, errOut lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- toolctl.Run(ctx, []string{"events", "--follow", "--nats", w.url}, &out, &errOut) }()
	waitFor := func(what string) {
		t.Helper()
		deadline := time.After(60 * time.Second)
		for {
			changed := out.changed()
			if strings.Contains(out.String(), what) {
				return
			}
			select {
			case code := <-done:
				t.Fatalf("events ended (%d) before printing %s:\n%s%s", code, what, &out, &errOut)
			case <-changed:
			case <-deadline:
				t.Fatalf("events never printed %s:\n%s", what, &out)
			}
		}
	}
	waitFor(`"call_id":"before-follow"`)
	if _, errOut, code := run(t, "--nats", w.url, "call", "--id", "during-follow", "ls"); code != toolctl.ExitOK {
		t.Fatalf("call: %s", errOut)
	}
	waitFor(`"call_id":"during-follow"`)
	cancel()
	select {
	case code := <-done:
		if code != toolctl.ExitOK {
			t.Fatalf("events --follow exited %d after an interrupt: %s", code, &errOut)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("events --follow did not stop")
	}
	if i, j := strings.Index(out.String(), "before-follow"), strings.Index(out.String(), "during-follow"); i < 0 || j < i {
		t.Fatalf("stored events do not come first:\n%s", &out)
	}
}

// TestExitCodes: a call's outcome is its exit code (README "Exit codes"):
// interrupting toolctl while it waits exits 130, not "unreachable"; the
// cancellation of a mistyped call id fails at once, saying so.
func TestExitCodes(t *testing.T) {
	w := startWorker(t)
	t.Run("interrupted", func(t *testing.T) {
		var out, errOut lockedBuffer
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan int, 1)
		go func() {
			done <- toolctl.Run(ctx, []string{"--nats", w.url, "call", "bash", "command=git push"}, &out, &errOut)
		}()
		for {
			changed := errOut.changed() // before looking, so no write is missed
			if strings.Contains(errOut.String(), "is parked") {
				break
			}
			select {
			case code := <-done:
				t.Fatalf("call ended (%d) before it was parked:\n%s", code, &errOut)
			case <-changed:
			case <-time.After(testenv.Patience):
				t.Fatalf("the call was never parked:\n%s", &errOut)
			}
		}
		cancel() // Ctrl-C
		if code := testenv.Recv(t, done, "toolctl's exit"); code != toolctl.ExitInterrupted {
			t.Fatalf("exit %d after an interrupt, want %d:\n%s", code, toolctl.ExitInterrupted, &errOut)
		}
	})
	t.Run("cancel of an unknown id", func(t *testing.T) {
		out, errOut, code := run(t, "--nats", w.url, "cancel", "no-such-call")
		if code != toolctl.ExitFailed || !strings.Contains(errOut, "has no call no-such-call") || out != "" {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
	})
	for status, code := range map[events.Status]int{events.StatusOK: 0, events.StatusError: 1, events.StatusTimeout: 1,
		events.StatusDenied: 4, events.StatusRejected: 5, events.StatusExpired: 5, events.StatusCancelled: 5} {
		if got := toolctl.StatusExit(status); got != code {
			t.Errorf("status %s exits %d, want %d", status, got, code)
		}
	}
}

// TestHelpOnStdout: help asked for is printed on stdout with examples and
// the exit codes, by --help and by the help command; a usage error goes
// to stderr.
func TestHelpOnStdout(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"usage: toolctl", "examples:", "exit codes:", "130"}},
		{[]string{"help"}, []string{"usage: toolctl", "  help "}},
		{[]string{"help", "call"}, []string{"usage: toolctl call TOOL", "examples:", "toolctl call read path=README.md"}},
		{[]string{"call", "--help"}, []string{"usage: toolctl call TOOL", "-wait duration", "examples:"}},
		{[]string{"help", "approvals"}, []string{"approvals approve ID", "toolctl approvals list"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, errOut, code := run(t, tt.args...)
			if code != toolctl.ExitOK || errOut != "" {
				t.Fatalf("exit %d, stderr:\n%s", code, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
		})
	}
	out, errOut, code := run(t, "cal")
	if code != toolctl.ExitUsage || out != "" || !strings.Contains(errOut, "usage: toolctl") {
		t.Fatalf("unknown command: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}
