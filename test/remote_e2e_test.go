package test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
)

// startServing runs a remote tool program and waits until it says it
// serves.
func startServing(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	startUntil(t, cmd, "serves", func(l string) bool { return strings.HasPrefix(l, "serving") })
}

// startUntil runs cmd until the test ends and waits until a line of its
// stderr satisfies said (it then says what).
func startUntil(t *testing.T, cmd *exec.Cmd, what string, said func(string) bool) {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("%s exited before it %s", cmd.Path, what)
			}
			if said(l) {
				go func() {
					for range lines {
					}
				}()
				return
			}
		case <-deadline:
			t.Fatalf("%s never said it %s", cmd.Path, what)
		}
	}
}

// TestRemoteToolsInTwoLanguages serves a tool from a Go process
// (examples/remote-tool-go) and one from a Node.js process
// (examples/remote-tool-node) as NATS micro services; the worker finds
// both, agents call them through the gate, and a tool whose process ends
// leaves the registry with a ToolUnregistered event.
func TestRemoteToolsInTwoLanguages(t *testing.T) {
	node := testenv.LookPath(t, "node", "nodejs")
	nodeDir, _ := filepath.Abs("../examples/remote-tool-node")
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "@nats-io")); err != nil {
		testenv.Missing(t, "the Node.js example's packages are not installed: run `npm ci` in examples/remote-tool-node (needs npm: apt-get install -y npm)")
	}
	bin := filepath.Join(t.TempDir(), "remote-tool-go")
	if out, err := exec.Command("go", "build", "-o", bin, "../examples/remote-tool-go").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, "default: ask\nallow: [word_count, slugify]\n")
	w := startProcess(t, newWorkspace(t), func(o *daemon.Options) {
		o.PolicyFile = pol
		o.RemoteInterval = 200 * time.Millisecond
	})
	// Each service has credentials of its own tool: the Go one takes
	// --creds, the Node one $NATS_CREDS.
	startServing(t, exec.Command(bin, "--nats", w.url, "--creds", installCredsFile(t, identity.RoleTool, "word_count")))
	nodeCmd := exec.Command(node, "slugify.mjs", w.url)
	nodeCmd.Dir = nodeDir
	nodeCmd.Env = append(os.Environ(), "NATS_CREDS="+installCredsFile(t, identity.RoleTool, "slugify"))
	startServing(t, nodeCmd)

	c := w.client(t, "agent-remote")
	listed := func(want ...string) func() (bool, string) {
		return func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			list, _ := c.Tools(ctx)
			var names []string
			for _, tl := range list {
				names = append(names, tl.Name)
			}
			for _, n := range want {
				if !slices.Contains(names, n) {
					return false, strings.Join(names, " ")
				}
			}
			return true, ""
		}
	}
	eventually(t, "both remote tools listed", listed("word_count", "slugify"))
	assertToolRegistered(t, w.url, "slugify")

	r := call(t, c, "word_count", `{"text":"the quick brown fox"}`)
	if r.Status != events.StatusOK || r.Output != "4 words" {
		t.Fatalf("word_count = %+v", r)
	}
	r = call(t, c, "slugify", `{"title":"Hello, World: MCP & NATS"}`)
	if r.Status != events.StatusOK || r.Output != "hello-world-mcp-nats" || r.Metadata["agent"] != "agent-remote" {
		t.Fatalf("slugify = %+v", r)
	}
	r = call(t, c, "slugify", `{"title":""}`)
	if r.Status != events.StatusError || r.Error != "invalid_arguments" {
		t.Fatalf("slugify with an empty title = %+v", r)
	}

	// The Node process ends: slugify leaves the registry, word_count stays.
	_ = nodeCmd.Process.Kill()
	eventually(t, "slugify unregistered", func() (bool, string) {
		ok, names := listed("slugify")()
		return !ok, fmt.Sprint(names)
	})
	if ok, names := listed("word_count")(); !ok {
		t.Fatalf("word_count gone too: %s", names)
	}
	nc := dialAs(t, w.url, identity.RoleAdmin, "admin")
	js, _ := jetstream.New(nc)
	st, err := js.Stream(context.Background(), bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(context.Background(), events.ToolEventSubject("slugify"))
	if err != nil {
		t.Fatal(err)
	}
	ev, _, err := events.Decode(m.Header, m.Data)
	if err != nil || ev.Type() != events.TypeToolUnregistered {
		t.Fatalf("last slugify event %v %v, want %s", ev.Type(), err, events.TypeToolUnregistered)
	}
}
