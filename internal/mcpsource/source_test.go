package mcpsource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// serverEnv makes the test binary an MCP server on stdio: the stdio
// tests run it as a real process.
const serverEnv = "TOOLGATE_TEST_MCP_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) == "1" {
		if err := testServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, "test server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testenv.Main(m)
}

type echoIn struct {
	Text string `json:"text" jsonschema:"the text to echo"`
}

type markerIn struct {
	Path string `json:"path"`
}

// testServer is an MCP server built with the Go SDK: echo (which claims
// to be read-only), marker (writes a file), crash (the process dies), and
// grow (adds a tool, so the list changes).
func testServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "go-test-server", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echo the text.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo: " + in.Text}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "marker", Description: "Write a marker file."},
		func(_ context.Context, _ *mcp.CallToolRequest, in markerIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "wrote"}}}, nil, os.WriteFile(in.Path, []byte("x"), 0o644)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "Exit the server process."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			os.Exit(3)
			return nil, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "grow", Description: "Add the tool extra."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			mcp.AddTool(s, &mcp.Tool{Name: "extra", Description: "Added later."},
				func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "extra ran"}}}, nil, nil
				})
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "grown"}}}, nil, nil
		})
	return s
}

// changes records registry changes and lets a test wait for one.
type changes struct {
	mu   sync.Mutex
	log  []string // "+name" / "-name"
	cond chan struct{}
}

func watch(reg *tools.Registry) *changes {
	c := &changes{cond: make(chan struct{}, 1)}
	reg.Watch(func(ch tools.Change) {
		sign := "+"
		if ch.Kind == tools.Unregistered {
			sign = "-"
		}
		c.mu.Lock()
		c.log = append(c.log, sign+ch.Tool.Name)
		c.mu.Unlock()
		select {
		case c.cond <- struct{}{}:
		default:
		}
	})
	return c
}

// waitFor waits until the change log holds want after position from, and
// returns the position after it.
func (c *changes) waitFor(t *testing.T, from int, want string) int {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		c.mu.Lock()
		for i := from; i < len(c.log); i++ {
			if c.log[i] == want {
				c.mu.Unlock()
				return i + 1
			}
		}
		got := strings.Join(c.log, " ")
		c.mu.Unlock()
		select {
		case <-c.cond:
		case <-deadline:
			t.Fatalf("registry never saw %s; changes: %s", want, got)
		}
	}
}

// waitAll waits for every one of want after position from and returns
// the position after the last of them.
func (c *changes) waitAll(t *testing.T, from int, want ...string) int {
	t.Helper()
	end := from
	for _, w := range want {
		end = max(end, c.waitFor(t, from, w))
	}
	return end
}

func (c *changes) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, l := range c.log {
		if l == name {
			n++
		}
	}
	return n
}

func startSources(t *testing.T, doc string, reg *tools.Registry) {
	t.Helper()
	cfg, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, cfg, Options{Registry: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	t.Cleanup(func() {
		cancel()
		testenv.Recv(t, done, "done")
		for _, n := range reg.Names() {
			if strings.HasPrefix(n, Prefix) {
				t.Errorf("%s still registered after the sources stopped", n)
			}
		}
	})
}

func call(t *testing.T, p *tools.Pipeline, name, args string) (*tools.Output, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return p.Handle(ctx, &tools.Call{ID: "c-" + name, Agent: "agent", Name: name, Arguments: json.RawMessage(args)})
}

// TestStdioServer runs a Go SDK server as a real process and checks what
// a worker gets: its tools with their schemas and the conservative kind,
// calls through the policy gate, list changes, and a restart after a
// crash.
func TestStdioServer(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	ch := watch(reg)
	doc := fmt.Sprintf(`{"mcpServers":{"go":{"command":%q,"env":{%q:"1"}}}}`, exe, serverEnv)
	startSources(t, doc, reg)
	pos := ch.waitAll(t, 0, "+mcp__go__crash", "+mcp__go__echo", "+mcp__go__grow", "+mcp__go__marker")

	echo, ok := reg.Get("mcp__go__echo")
	if !ok {
		t.Fatal("mcp__go__echo not registered")
	}
	if echo.Kind != policy.KindExecute || echo.Category != "mcp" || !echo.Annotations.ReadOnly {
		t.Errorf("echo: kind %s category %s annotations %+v; want execute (a read-only hint is not trusted), mcp, the hint kept",
			echo.Kind, echo.Category, echo.Annotations)
	}
	if !strings.Contains(string(echo.Parameters), `"text"`) {
		t.Errorf("echo schema %s lacks text", echo.Parameters)
	}

	pol, _, err := policy.Parse([]byte("default: allow\ndeny: [mcp__go__marker]\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	p := tools.NewPipeline(reg, tools.WithGate(policy.NewGate(pol)))

	out, err := call(t, p, "mcp__go__echo", `{"text":"hi"}`)
	if err != nil || out.IsError || out.Content != "echo: hi" {
		t.Fatalf("echo = %+v, %v", out, err)
	}
	if _, err := call(t, p, "mcp__go__echo", `{"text":5}`); !errors.Is(err, tools.ErrInvalidArguments) {
		t.Fatalf("echo with a number: err %v, want ErrInvalidArguments", err)
	}
	marker := filepath.Join(t.TempDir(), "marker")
	if _, err := call(t, p, "mcp__go__marker", fmt.Sprintf(`{"path":%q}`, marker)); !errors.Is(err, tools.ErrDenied) {
		t.Fatalf("marker: err %v, want ErrDenied", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a denied MCP tool ran: the marker file exists")
	}

	if out, err := call(t, p, "mcp__go__grow", `{}`); err != nil || out.Content != "grown" {
		t.Fatalf("grow = %+v, %v", out, err)
	}
	pos = ch.waitFor(t, pos, "+mcp__go__extra")
	if out, err := call(t, p, "mcp__go__extra", `{}`); err != nil || out.Content != "extra ran" {
		t.Fatalf("extra = %+v, %v", out, err)
	}

	out, err = call(t, p, "mcp__go__crash", `{}`)
	if err == nil && !out.IsError {
		t.Fatalf("crash = %+v, want an error", out)
	}
	pos = ch.waitFor(t, pos, "-mcp__go__echo")
	ch.waitAll(t, pos, "+mcp__go__crash", "+mcp__go__echo", "+mcp__go__grow", "+mcp__go__marker")
	if out, err := call(t, p, "mcp__go__echo", `{"text":"again"}`); err != nil || out.Content != "echo: again" {
		t.Fatalf("echo after the restart = %+v, %v", out, err)
	}
	if n := ch.count("+mcp__go__echo"); n != 2 {
		t.Errorf("echo registered %d times, want 2 (start, restart)", n)
	}
}

// TestHTTPServer reaches a Go SDK server over Streamable HTTP with a
// header taken from the environment.
func TestHTTPServer(t *testing.T) {
	var refused sync.Map
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return testServer() }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			refused.Store(r.Header.Get("Authorization"), true)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("TEST_MCP_TOKEN", "s3cret")
	reg := tools.NewRegistry()
	ch := watch(reg)
	doc := fmt.Sprintf(`{"mcpServers":{"web":{"type":"http","url":%q,"headers":{"Authorization":"Bearer ${TEST_MCP_TOKEN}"},"kind":"read"}}}`, srv.URL+"/mcp")
	startSources(t, doc, reg)
	ch.waitAll(t, 0, "+mcp__web__echo", "+mcp__web__marker")
	echo, _ := reg.Get("mcp__web__echo")
	if echo.Kind != policy.KindRead {
		t.Errorf("kind %s, want read as configured", echo.Kind)
	}
	p := tools.NewPipeline(reg)
	out, err := call(t, p, "mcp__web__echo", `{"text":"over http"}`)
	if err != nil || out.Content != "echo: over http" {
		t.Fatalf("echo = %+v, %v", out, err)
	}
	refused.Range(func(k, _ any) bool { t.Errorf("request refused with Authorization %q", k); return true })
}

func TestOutputFlattensContent(t *testing.T) {
	r := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{
		&mcp.TextContent{Text: "line"},
		&mcp.ImageContent{MIMEType: "image/png", Data: []byte{1, 2, 3}},
		&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///a", Text: "body"}},
		&mcp.ResourceLink{Name: "b", URI: "file:///b"},
	}}
	out := output(r)
	want := "line\n[image image/png, 3 bytes]\n[resource file:///a]\nbody\n[resource b file:///b]"
	if out.Content != want || !out.IsError {
		t.Errorf("output = %q (error %v), want %q", out.Content, out.IsError, want)
	}
	out = output(&mcp.CallToolResult{StructuredContent: map[string]any{"n": 1}})
	if out.Content != `{"n":1}` {
		t.Errorf("structured only = %q", out.Content)
	}
}
