//go:build linux

package bash_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// preparedBash is a pipeline with the bash tool whose sandboxes are
// prepared ahead, in a fresh workspace of testUID.
func preparedBash(t *testing.T) (ws string, p *tools.Pipeline, used func() int, settle func()) {
	t.Helper()
	testenv.LookPath(t, "bwrap", "bubblewrap")
	buildSandboxInit(t)
	old := bash.SetSandboxInit(buildSandboxInit(t))
	t.Cleanup(func() { bash.SetSandboxInit(old) })
	ws = newWorkspace(t, testUID)
	tool, used, settle := bash.NewPrepared(t, bash.Config{Workspace: ws, Sandbox: bash.ModeRequire})
	reg := tools.NewRegistry()
	if err := reg.Register(tool); err != nil {
		t.Fatal(err)
	}
	return ws, tools.NewPipeline(reg, tools.WithWorkspace(ws)), used, settle
}

// shellOut runs command and returns its stdout and stderr.
func shellOut(t *testing.T, p *tools.Pipeline, command string, edit ...func(*tools.Call)) string {
	t.Helper()
	out, err := run(context.Background(), t, p, map[string]any{"command": command}, edit...)
	if err != nil {
		t.Fatalf("%s: %v", command, err)
	}
	return md[string](t, out, "stdout") + md[string](t, out, "stderr")
}

// TestPreparedSandboxLeavesNothingToTheNext: a call in a prepared sandbox
// finds nothing of the call before it: not the files it left in /tmp,
// /dev/shm or its home, not the processes it left running (gone from the
// host too, before the next call starts), and it still writes the
// workspace and gets a home of its own.
func TestPreparedSandboxLeavesNothingToTheNext(t *testing.T) {
	ws, p, used, settle := preparedBash(t)
	tag := sleepArg()
	leave := "echo x > /tmp/left-tmp; echo x > /dev/shm/left-shm; echo x > $HOME/left-home; " +
		"(sleep " + tag + " &); setsid sleep " + tag + " & nohup sleep " + tag + " >/dev/null 2>&1 & echo left > in-ws"
	look := "ls -a /tmp /dev/shm $HOME; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done; " +
		"touch $HOME/mine && echo home-writable; id -u; pwd"
	shellOut(t, p, "true") // a view seen once: the next call of it prepares
	for i := range 3 {
		shellOut(t, p, leave)
		if got := readTestFile(t, filepath.Join(ws, "in-ws")); got != "left\n" {
			t.Fatalf("call %d wrote %q to the workspace", i, got)
		}
		if n := hostProcs(t, tag); n != 0 {
			t.Errorf("call %d: %d of its processes still run on the host after it ended", i, n)
		}
		settle()
		before := used()
		out := shellOut(t, p, look)
		t.Logf("call %d:\n%s", i, out)
		if used() == before {
			t.Errorf("call %d did not run in a prepared sandbox", i)
		}
		for _, leak := range []string{"left-tmp", "left-shm", "left-home", "sleep " + tag} {
			if strings.Contains(out, leak) {
				t.Errorf("call %d after one that left %s sees it:\n%s", i, leak, out)
			}
		}
		for _, want := range []string{"home-writable", ws} {
			if !strings.Contains(out, want) {
				t.Errorf("call %d: output lacks %q:\n%s", i, want, out)
			}
		}
		if os.Geteuid() == 0 && !strings.Contains(out, "\n4242\n") {
			t.Errorf("call %d did not run as the workspace's owner:\n%s", i, out)
		}
		settle()
	}
}

// hostProcs counts the processes on the host whose command line holds tag.
func hostProcs(t *testing.T, tag string) int {
	t.Helper()
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	n := 0
	for _, f := range cmdlines {
		b, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(b), tag) && strings.HasPrefix(string(b), "sleep") {
			n++
		}
	}
	return n
}

// TestPreparedSandboxesOfConcurrentCalls: two agents' calls running at
// once, each in its own sandbox (prepared or not), never see each other's
// files in /tmp or /dev/shm nor each other's processes.
func TestPreparedSandboxesOfConcurrentCalls(t *testing.T) {
	_, p, used, settle := preparedBash(t)
	shellOut(t, p, "true")
	shellOut(t, p, "true") // the view's second call: prepares two
	settle()
	before := used()
	twoAgents(t, p, nil)
	if used() == before {
		t.Errorf("neither call ran in a prepared sandbox")
	}
}

// twoAgents runs two agents' calls at once through p: each leaves a file
// in /tmp and /dev/shm and a process, waits until the other has had time
// to do the same, looks, and runs then what last(i) gives (nothing when
// last is nil). Each must see its own file and process and nothing of the
// other's. It returns their outputs.
func twoAgents(t *testing.T, p *tools.Pipeline, last func(i int) string) []string {
	t.Helper()
	tags := []string{sleepArg(), sleepArg()}
	outs := make([]string, 2)
	var wg sync.WaitGroup
	for i, agent := range []string{"agent-a", "agent-b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			me := tags[i]
			cmd := "echo x > /tmp/mine-" + me + "; echo x > /dev/shm/mine-" + me + "; (sleep " + me + " &); sleep 1; " +
				"ls /tmp /dev/shm; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done"
			if last != nil {
				cmd += "; " + last(i)
			}
			outs[i] = shellOut(t, p, cmd, func(c *tools.Call) { c.Agent, c.ID = agent, "call-"+agent })
		}()
	}
	wg.Wait()
	for i, out := range outs {
		if !strings.Contains(out, "mine-"+tags[i]) || !strings.Contains(out, "sleep "+tags[i]) {
			t.Errorf("call %d does not see its own file and process:\n%s", i, out)
		}
		if other := tags[1-i]; strings.Contains(out, other) {
			t.Errorf("call %d sees the other call's file or process (%s):\n%s", i, other, out)
		}
	}
	return outs
}

// TestPreparedSandboxWithAMaskUndoneIsNotUsed: a prepared sandbox masks
// the denied files and binds the protected ones read-only as the gate's
// grant said when it was made. When the host removes such a file and
// writes it again, the kernel detaches that mount in the prepared
// sandbox; the grant computed for the next call is the same (same
// names), so the sandbox would match its key. It is not used: the call
// prints no secret and changes no protected file.
func TestPreparedSandboxWithAMaskUndoneIsNotUsed(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	pol, _, err := policy.Parse([]byte(boundaryPolicy), "test")
	if err != nil {
		t.Fatal(err)
	}
	gate := policy.NewGate(pol)
	for _, tt := range []struct {
		name, file, judged, ran string
	}{
		{"a denied file", "key.pem", "cat notes.txt", "cat key.pem"},
		// Judged to write the workspace: all of it but the protected files.
		{"a protected file", ".gitattributes", "cp notes.txt copy.txt; mv copy.txt c2.txt; mkdir d", "echo '* filter=x' > .gitattributes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ws := newWorkspace(t, testUID)
			writeTestFile(t, filepath.Join(ws, "notes.txt"), "notes\n")
			writeTestFile(t, filepath.Join(ws, tt.file), boundarySecret+"\n")
			chownTree(t, ws, testUID)
			tool, used, settle := bash.NewPrepared(t, bash.Config{Workspace: ws, Sandbox: bash.ModeRequire})
			reg := tools.NewRegistry()
			if err := reg.Register(tool); err != nil {
				t.Fatal(err)
			}
			p := tools.NewPipeline(reg, tools.WithWorkspace(ws), tools.WithGate(mispredicted(gate, tt.judged, tt.ran)))
			call := func() string {
				out, err := run(context.Background(), t, p, map[string]any{"command": tt.judged})
				if err != nil {
					t.Fatal(err)
				}
				return md[string](t, out, "stdout") + md[string](t, out, "stderr")
			}
			check := func(out string) {
				t.Helper()
				if strings.Contains(out, boundarySecret) {
					t.Errorf("%s printed the secret:\n%s", tt.ran, out)
				}
				if got := readTestFile(t, filepath.Join(ws, tt.file)); got != boundarySecret+"\n" {
					t.Errorf("%s changed %s: %q", tt.ran, tt.file, got)
				}
			}
			check(call())
			check(call()) // the view's second call prepares sandboxes for it
			settle()
			// Removed and written again by someone outside the call.
			if err := os.Remove(filepath.Join(ws, tt.file)); err != nil {
				t.Fatal(err)
			}
			writeTestFile(t, filepath.Join(ws, tt.file), boundarySecret+"\n")
			chownTree(t, ws, testUID)
			before := used()
			check(call())
			if used() != before {
				t.Errorf("the call ran in a sandbox prepared before %s was replaced", tt.file)
			}
			// The sandboxes prepared since are used, and hold.
			settle()
			check(call())
			if used() == before {
				t.Errorf("no call ran in a sandbox prepared after %s was replaced", tt.file)
			}
		})
	}
}
