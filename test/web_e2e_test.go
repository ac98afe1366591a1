package test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
)

// The web tools and bash's egress through a worker: web_search reaches
// the configured Tavily-compatible service with the key from the
// worker's configuration; web_fetch and bash (granted the network, so
// through the egress proxy) cannot reach a loopback server even where
// the allowlist names every host — the server's request count stays 0.
func TestWebToolsOverTheBus(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	testenv.LookPath(t, "curl", "curl")
	var searchAuth atomic.Value
	tavily := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		searchAuth.Store(r.Method + " " + r.URL.Path + " " + r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"query": "toolgate", "answer": null, "images": [], "results": [{"title": "toolgate docs", "url": "https://example.org/toolgate", "content": "tool calls for fleets", "score": 0.9, "raw_content": null}], "response_time": 0.5, "request_id": "r-1"}`)
	}))
	defer tavily.Close()
	var hits atomic.Int64
	local := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer local.Close()
	port := strconv.Itoa(local.Listener.Addr().(*net.TCPAddr).Port)

	ws := newWorkspace(t)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	doc := "default: allow\nexec: {security: full}\nkinds: {network: allow}\nnetwork: {allow: [\"*:*\"]}\n" +
		"agents:\n  \"offline-*\":\n    kinds: {network: deny}\n"
	if err := os.WriteFile(pol, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, ws, func(o *daemon.Options) {
		o.PolicyFile, o.SearchAPIKey, o.SearchURL = pol, "tvly-e2e-key", tavily.URL
	})
	c := p.client(t, "agent-web")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, s := range []struct {
		tool    string
		args    map[string]any
		status  events.Status
		contain string
	}{
		{"web_search", map[string]any{"query": "toolgate"}, events.StatusOK, "1. toolgate docs\n   https://example.org/toolgate"},
		{"web_fetch", map[string]any{"url": "http://127.0.0.1:" + port + "/"}, events.StatusError, "connection to 127.0.0.1 refused: loopback address"},
		{"web_fetch", map[string]any{"url": "http://localhost:" + port + "/"}, events.StatusError, "connection to localhost refused: it resolves to"},
		{"web_fetch", map[string]any{"url": "http://169.254.169.254/latest/meta-data/"}, events.StatusError, "cloud metadata"},
		{"bash", map[string]any{"command": "curl -sS -o /dev/null -w '%{http_code}' --noproxy '' http://127.0.0.1:" + port + "/"}, events.StatusOK, "403"},
		{"bash", map[string]any{"command": "curl -sS -o /dev/null -w '%{http_code}' --noproxy '*' http://127.0.0.1:" + port + "/; true"}, events.StatusOK, "000"},
	} {
		res, err := c.Call(ctx, s.tool, s.args)
		if err != nil {
			t.Fatalf("%s %v: %v", s.tool, s.args, err)
		}
		if res.Status != s.status || !strings.Contains(res.Output, s.contain) {
			t.Fatalf("%s %v: status %s, want %s containing %q:\n%s", s.tool, s.args, res.Status, s.status, s.contain, res.Output)
		}
		if s.tool == "bash" && res.Metadata["egress"] != "proxy" {
			t.Fatalf("bash metadata %v, want egress proxy", res.Metadata)
		}
		if refused, _ := res.Metadata["egress_refused"].([]any); s.contain == "403" &&
			(len(refused) != 1 || !strings.Contains(refused[0].(string), "127.0.0.1:"+port+": connection to 127.0.0.1 refused: loopback address")) {
			t.Fatalf("egress_refused %v, want the refused address", res.Metadata["egress_refused"])
		}
	}
	if got := searchAuth.Load(); got != "POST /search Bearer tvly-e2e-key" {
		t.Fatalf("the search service received %v", got)
	}
	// An agent whose policy denies the network kind is refused outright.
	res, err := p.client(t, "offline-1").Call(ctx, "web_fetch", json.RawMessage(`{"url":"https://example.org/"}`))
	if err != nil || res.Status != events.StatusDenied {
		t.Fatalf("offline agent: %+v %v", res, err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the loopback server received %d requests, want 0", n)
	}
}
