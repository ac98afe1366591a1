// Package test holds end-to-end tests: a whole worker process (embedded
// nats-server, built-in tools, sandbox) driven through the bus by the Go
// client and by toolctl, as users drive it.
package test

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

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/teststack"
	"github.com/toolgate/toolgate/internal/toolctl"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// process is a running worker process, as `go run ./cmd/worker` starts it.
type process struct {
	url  string
	ws   string
	out  *bytes.Buffer
	stop func() error
}

// startProcess runs a worker on workspace ws until the test ends.
func startProcess(t *testing.T, ws string, mod func(*daemon.Options)) *process {
	t.Helper()
	return asProcess(teststack.StartWorker(t, ws, mod))
}

// asProcess is w under the names the tests use.
func asProcess(w *teststack.Worker) *process {
	return &process{url: w.URL, ws: w.Workspace, out: w.Out, stop: w.Stop}
}

func (p *process) toolctl(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code = toolctl.Run(ctx, append([]string{"--nats", p.url, "--agent", "cli"}, args...), &o, &e)
	return o.String(), e.String(), code
}

func (p *process) client(t *testing.T, agent string) *client.Client {
	t.Helper()
	return teststack.Client(t, p.url, agent)
}

// The stack helpers the tests share with the browser tests, under the
// names the tests use.
var (
	writeFile     = teststack.WriteFile
	newWorkspace  = teststack.NewWorkspace
	wait          = teststack.Wait
	startApprover = teststack.StartApprover
	submitBash    = teststack.SubmitBash
)

// TestQuickStart is the README's quick start: a worker with no
// configuration, and `toolctl call read path=README.md` printing the file.
func TestQuickStart(t *testing.T) {
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "# hello\nfrom the quick start\n")
	p := startProcess(t, ws, nil)
	if !strings.Contains(p.out.String(), "listening on nats://127.0.0.1:") || !strings.Contains(p.out.String(), "data in ") {
		t.Fatalf("start-up banner does not say where it listens and stores:\n%s", p.out)
	}
	out, errOut, code := p.toolctl(t, "call", "read", "path=README.md")
	if code != toolctl.ExitOK || !strings.Contains(out, "from the quick start") || !strings.Contains(out, "     2\t") {
		t.Fatalf("toolctl call read: code %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	out, _, code = p.toolctl(t, "tools")
	for _, name := range []string{"read (read_file)", "bash (run_shell, exec)", "grep (search_files)"} {
		if code != 0 || !strings.Contains(out, name) {
			t.Fatalf("toolctl tools lacks %q:\n%s", name, out)
		}
	}
	// A refused call exits non-zero and says why.
	_, errOut, code = p.toolctl(t, "call", "read", "path=../outside")
	if code != toolctl.ExitDenied || !strings.Contains(errOut, "status denied") || !strings.Contains(errOut, "outside the workspace") {
		t.Fatalf("read outside: code %d stderr %s", code, errOut)
	}
	out, _, code = p.toolctl(t, "events", "--json")
	if code != 0 || !strings.Contains(out, events.TypeCallCompleted) || !strings.Contains(out, events.TypeCallAudited) || !strings.Contains(out, events.TypeToolRegistered) {
		t.Fatalf("toolctl events:\n%s", out)
	}
	if err := p.stop(); err != nil {
		t.Fatalf("worker did not stop cleanly: %v", err)
	}
}

// TestEveryToolOverTheBus runs each built-in tool end to end through the
// bus.
func TestEveryToolOverTheBus(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "src", "main.go"), "package main\n\nfunc main() { println(\"needle\") }\n")
	writeFile(t, filepath.Join(ws, ".skills", "review", "SKILL.md"), "---\nname: review\ndescription: review a change\n---\nRead the diff twice.\n")
	p := startProcess(t, ws, nil)
	c := p.client(t, "agent-e2e")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	steps := []struct {
		tool    string
		args    string
		status  events.Status
		contain string
	}{
		{"write", `{"path":"notes/todo.txt","content":"one\ntwo\n"}`, events.StatusOK, ""},
		{"read_file", `{"path":"notes/todo.txt"}`, events.StatusOK, "     2\ttwo"},
		{"edit", `{"path":"notes/todo.txt","old_string":"two","new_string":"three"}`, events.StatusOK, "+three"},
		{"read", `{"path":"notes/todo.txt","start_line":2,"end_line":2}`, events.StatusOK, "three"},
		{"ls", `{"path":"notes"}`, events.StatusOK, "todo.txt"},
		{"glob", `{"pattern":"**/*.go"}`, events.StatusOK, "src/main.go"},
		{"grep", `{"pattern":"needle","output_mode":"content"}`, events.StatusOK, "main.go:3:"},
		{"grep", `{"pattern":"absent-word"}`, events.StatusOK, ""},
		{"bash", `{"command":"echo out; echo err >&2; cat notes/todo.txt"}`, events.StatusOK, "three"},
		{"bash", `{"command":"exit 7"}`, events.StatusError, "7"},
		{"skill", `{"skill":"review"}`, events.StatusOK, "Read the diff twice."},
		{"read", `{"path":"/etc/passwd"}`, events.StatusDenied, "outside"},
		{"edit", `{"path":"notes/todo.txt","old_string":"same","new_string":"same"}`, events.StatusError, ""},
	}
	for _, s := range steps {
		res, err := c.Call(ctx, s.tool, json.RawMessage(s.args))
		if err != nil {
			t.Fatalf("%s %s: %v", s.tool, s.args, err)
		}
		if res.Status != s.status || !strings.Contains(res.Output, s.contain) {
			t.Fatalf("%s %s: status %s, want %s containing %q:\n%s", s.tool, s.args, res.Status, s.status, s.contain, res.Output)
		}
	}
	b, err := os.ReadFile(filepath.Join(ws, "notes", "todo.txt"))
	if err != nil || string(b) != "one\nthree\n" {
		t.Fatalf("file after write+edit = %q, %v", b, err)
	}
	// The bash result keeps stdout, stderr and the exit code apart.
	res, err := c.Call(ctx, "bash", map[string]any{"command": "echo out; echo err >&2; exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Metadata["stdout"] != "out\n" || res.Metadata["stderr"] != "err\n" || res.Metadata["exit_code"] != float64(3) {
		t.Fatalf("bash metadata = %v", res.Metadata)
	}
	// Output streams to the agent as progress events while bash runs.
	var mu sync.Mutex
	var streamed strings.Builder
	res, err = c.Call(ctx, "bash", map[string]any{"command": "echo line-1; echo line-2; echo line-3"},
		client.OnProgress(func(p events.ProgressData) {
			mu.Lock()
			defer mu.Unlock()
			if p.Stream == "stdout" {
				streamed.WriteString(p.Chunk)
			}
		}))
	if err != nil || res.Status != events.StatusOK {
		t.Fatalf("bash with progress: %+v %v", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if streamed.String() != "line-1\nline-2\nline-3\n" {
		t.Fatalf("progress carried %q", streamed.String())
	}
}

// TestWorkerOnAnExistingServer: with --nats the worker uses that server
// (here a separate nats-server process stand-in) and starts none itself.
func TestWorkerOnAnExistingServer(t *testing.T) {
	srv := testenv.StartNATS(t, "")
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "remote\n")
	p := startProcess(t, ws, func(o *daemon.Options) { o.NATSURL = srv.ClientURL() })
	if p.url != srv.ClientURL() || strings.Contains(p.out.String(), "embedded") || !strings.Contains(p.out.String(), "using NATS at "+srv.ClientURL()) {
		t.Fatalf("worker did not use the given server:\n%s", p.out)
	}
	out, _, code := p.toolctl(t, "call", "read", "path=README.md")
	if code != 0 || !strings.Contains(out, "remote") {
		t.Fatalf("call through the existing server: %d %s", code, out)
	}
}
