package test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestWorkerBinaryStopsCleanlyOnSIGTERM builds cmd/worker, runs it as a
// user would, lets a call finish while SIGTERM arrives, and expects exit 0.
func TestWorkerBinaryStopsCleanlyOnSIGTERM(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	bin := filepath.Join(t.TempDir(), "worker")
	build := exec.Command("go", "build", "-o", bin, "../cmd/worker")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "hello\n")
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", ws, "--sandbox", "require")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	urlRE := regexp.MustCompile(`listening on (nats://127\.0\.0\.1:\d+)`)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var url string
	var ready bool
	deadline := time.After(60 * time.Second)
	for url == "" || !ready {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("worker exited before it was ready")
			}
			if m := urlRE.FindStringSubmatch(l); m != nil {
				url = m[1]
			}
			if regexp.MustCompile(`worker taking calls`).MatchString(l) {
				ready = true
			}
		case <-deadline:
			t.Fatal("worker never said where it listens")
		}
	}
	go func() {
		for range lines {
		}
	}()
	nc, _, err := identity.Dial(url, "", identity.RoleAgent, "sig")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, _ := client.New(nc, "sig")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, _ := nc.SubscribeSync(events.ResultSubject("sig", "during-stop"))
	// SIGTERM once the call runs: its first output, streamed as progress,
	// says it does.
	progress, _ := nc.SubscribeSync(events.ProgressSubject("sig", "during-stop"))
	if _, err := c.Submit(ctx, "bash", map[string]any{"command": "echo started; sleep 1; echo done"}, client.WithID("during-stop")); err != nil {
		t.Fatal(err)
	}
	if _, err := progress.NextMsg(30 * time.Second); err != nil {
		t.Fatalf("the call never started: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("no result for the call in flight: %v", err)
	}
	var r events.ResultData
	if _, err := events.DecodeData(m.Header, m.Data, &r); err != nil || r.Status != events.StatusOK || r.Output != "started\ndone\n" {
		t.Fatalf("result = %+v %v", r, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) || err != nil {
			t.Fatalf("worker exited with %v, want 0", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("worker did not exit after SIGTERM")
	}
	_ = os.Remove(bin)
}

// TestWorkerLogFormatJSON: with --log-format json every line the worker
// writes is a JSON object, its start-up lines and its last words included,
// and a size flag takes units.
func TestWorkerLogFormatJSON(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "worker")
	build := exec.Command("go", "build", "-o", bin, "../cmd/worker")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ws := newWorkspace(t)
	out := &syncBuffer{}
	cmd := exec.Command(bin, "--log-format", "json", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", ws,
		"--sandbox", "off", "--bash-memory", "512MiB", "--max-payload", "2MiB")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	for !strings.Contains(out.String(), "worker taking calls") {
		changed := out.changed()
		if strings.Contains(out.String(), "worker taking calls") {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("worker exited (%v) before it was ready:\n%s", err, out)
		case <-changed:
		case <-time.After(testenv.Patience):
			t.Fatalf("worker never became ready:\n%s", out)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := testenv.Recv(t, done, "the worker's exit"); err != nil {
		t.Fatalf("worker exited with %v:\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Errorf("not a JSON line: %q", l)
		}
	}
	if !strings.Contains(out.String(), `"msg":"embedded NATS with JetStream listening on nats://`) {
		t.Errorf("the start-up lines are not logged as records:\n%s", out)
	}
}
