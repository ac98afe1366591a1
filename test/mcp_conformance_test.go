package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/testenv"
)

// conformanceScenarios are the official suite's server scenarios that
// apply to a gateway; the others call the suite's own test tools,
// prompts and resources.
var conformanceScenarios = []string{
	"server-initialize",
	"ping",
	"tools-list",
	"dns-rebinding-protection",
	"logging-set-level",
	"server-sse-multiple-streams",
}

// npmTools returns the path of test/mcp/node_modules (installed by `npm ci`
// in test/mcp) and the node binary to run its programs with: the Node 22
// the lockfile installs, else node on PATH. It skips, or fails under CI,
// when they are missing.
func npmTools(t *testing.T) (modules, node string) {
	t.Helper()
	modules, _ = filepath.Abs(filepath.Join("mcp", "node_modules"))
	if _, err := os.Stat(filepath.Join(modules, "@modelcontextprotocol")); err != nil {
		testenv.Missing(t, "the MCP test programs are not installed: run `npm ci` in test/mcp (needs npm: apt-get install -y npm)")
	}
	node = filepath.Join(modules, ".bin", "node")
	if _, err := os.Stat(node); err != nil {
		node = testenv.LookPath(t, "node", "nodejs")
	}
	return modules, node
}

// TestMCPConformance runs the official MCP conformance suite
// (@modelcontextprotocol/conformance) against the worker's Streamable HTTP
// face, one scenario at a time.
func TestMCPConformance(t *testing.T) {
	modules, node := npmTools(t)
	suite := filepath.Join(modules, "@modelcontextprotocol", "conformance", "dist", "index.js")
	ws := newWorkspace(t)
	mcpReady := make(chan string, 1)
	startProcess(t, ws, func(o *daemon.Options) {
		o.MCPListen, o.MCPInsecureLoopback = "127.0.0.1:0", true // the suite sends no token
		o.MCPReady = func(u string) { mcpReady <- u }
	})
	// The DNS rebinding scenario wants a localhost URL.
	url := strings.Replace(<-mcpReady, "127.0.0.1", "localhost", 1)
	summary := regexp.MustCompile(`Passed: (\d+)/(\d+), 0 failed`)
	for _, sc := range conformanceScenarios {
		t.Run(sc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, suite, "server", "--url", url, "--scenario", sc, "-o", t.TempDir())
			cmd.Env = append(os.Environ(), "NO_COLOR=1")
			out, err := cmd.CombinedOutput()
			m := summary.FindSubmatch(out)
			if err != nil || m == nil || string(m[1]) != string(m[2]) {
				t.Fatalf("scenario %s failed (%v):\n%s", sc, err, out)
			}
			t.Logf("%s: %s", sc, m[0])
		})
	}
}
