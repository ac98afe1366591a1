package mcpsource

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/pkg/tools"
)

// Backoff bounds between restarts of a server that stopped or could not
// be reached. A server that stayed up for stableAfter starts over at
// minBackoff.
const (
	minBackoff  = 500 * time.Millisecond
	maxBackoff  = 60 * time.Second
	stableAfter = time.Minute
)

// Prefix starts the name of every MCP tool: mcp__<server>__<tool>.
const Prefix = "mcp__"

// ToolName is the registry name of tool of server.
func ToolName(server, tool string) string { return Prefix + server + "__" + tool }

// Options configure the sources.
type Options struct {
	// Registry receives the servers' tools. Required.
	Registry *tools.Registry
	// Logger receives logs; default slog.Default().
	Logger *slog.Logger
	// Version is the client version reported to servers.
	Version string
	// OnConnect, if set, is called after a server's tools were registered
	// (tests wait on it).
	OnConnect func(server string, tools []string)
}

// Run connects to every server of c and keeps its tools in the registry
// until ctx is done, restarting servers that stop. It returns when every
// server is disconnected and its tools are unregistered.
func Run(ctx context.Context, c *Config, o Options) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	var wg sync.WaitGroup
	for _, name := range c.Names() {
		src := &source{name: name, cfg: c.Servers[name], o: o, log: o.Logger.With("mcp_server", name)}
		wg.Add(1)
		go func() { defer wg.Done(); src.run(ctx) }()
	}
	wg.Wait()
}

// source is one server and the tools it has in the registry.
type source struct {
	name string
	cfg  *Server
	o    Options
	log  *slog.Logger

	mu      sync.Mutex
	session *mcp.ClientSession
	tools   map[string]string // registry name → the server's name, while registered
	defs    map[string]string // registry name → definition, to see changes
}

func (s *source) run(ctx context.Context) {
	backoff := minBackoff
	for ctx.Err() == nil {
		start := time.Now()
		err := s.serve(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > stableAfter {
			backoff = minBackoff
		}
		s.log.Warn("mcp server stopped; restarting", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// serve runs one connection: connect, register the tools, follow list
// changes, and unregister everything when the connection ends.
func (s *source) serve(ctx context.Context) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t, err := s.transport()
	if err != nil {
		return err
	}
	changed := make(chan struct{}, 1)
	client := mcp.NewClient(&mcp.Implementation{Name: "toolgate", Version: s.o.Version}, &mcp.ClientOptions{
		Logger: s.log,
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	connectCtx, connectCancel := context.WithTimeout(cctx, 60*time.Second)
	cs, err := client.Connect(connectCtx, t, nil)
	connectCancel()
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer s.drop(cs)
	s.mu.Lock()
	s.session = cs
	s.mu.Unlock()
	if err := s.sync(cctx, cs); err != nil {
		return err
	}
	ended := make(chan error, 1)
	go func() { ended <- cs.Wait() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-ended:
			if err == nil {
				err = errors.New("the connection ended")
			}
			return err
		case <-changed:
			if err := s.sync(cctx, cs); err != nil {
				return err
			}
		}
	}
}

// drop closes cs and takes the server's tools out of the registry.
func (s *source) drop(cs *mcp.ClientSession) {
	_ = cs.Close()
	s.mu.Lock()
	s.session = nil
	names := keys(s.tools)
	s.tools, s.defs = nil, nil
	s.mu.Unlock()
	for _, n := range names {
		s.o.Registry.Unregister(n)
	}
}

// sync lists the server's tools and makes the registry match.
func (s *source) sync(ctx context.Context, cs *mcp.ClientSession) error {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var listed []*mcp.Tool
	for t, err := range cs.Tools(lctx, nil) {
		if err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
		listed = append(listed, t)
	}
	s.mu.Lock()
	if s.tools == nil {
		s.tools, s.defs = map[string]string{}, map[string]string{}
	}
	s.mu.Unlock()
	seen := map[string]bool{}
	var added []string
	for _, mt := range listed {
		tool, err := s.tool(mt)
		if err != nil {
			s.log.Warn("mcp tool not registered", "tool", mt.Name, "err", err)
			continue
		}
		seen[tool.Name] = true
		def := tool.Description + "\x00" + string(tool.Parameters)
		s.mu.Lock()
		same := s.defs[tool.Name] == def
		_, had := s.tools[tool.Name]
		s.mu.Unlock()
		if same {
			continue
		}
		if had {
			s.o.Registry.Unregister(tool.Name)
		}
		if err := s.o.Registry.Register(tool); err != nil {
			s.log.Warn("mcp tool not registered", "tool", mt.Name, "err", err)
			continue
		}
		s.mu.Lock()
		s.tools[tool.Name], s.defs[tool.Name] = mt.Name, def
		s.mu.Unlock()
		added = append(added, tool.Name)
	}
	s.mu.Lock()
	var gone []string
	for n := range s.tools {
		if !seen[n] {
			gone = append(gone, n)
			delete(s.tools, n)
			delete(s.defs, n)
		}
	}
	all := keys(s.tools)
	s.mu.Unlock()
	for _, n := range gone {
		s.o.Registry.Unregister(n)
	}
	if len(added) > 0 || len(gone) > 0 {
		s.log.Info("mcp tools", "registered", added, "unregistered", gone)
	}
	if s.o.OnConnect != nil {
		s.o.OnConnect(s.name, all)
	}
	return nil
}

// tool is the registry entry of one of the server's tools.
func (s *source) tool(mt *mcp.Tool) (*tools.Tool, error) {
	schema, err := json.Marshal(mt.InputSchema)
	if err != nil || string(schema) == "null" {
		return nil, fmt.Errorf("input schema: %v", err)
	}
	var obj struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal(schema, &obj); err != nil || obj.Type != "object" {
		return nil, errors.New("input schema is not an object schema")
	}
	name := ToolName(s.name, mt.Name)
	t := &tools.Tool{
		Name:        name,
		Description: mt.Description,
		Parameters:  schema,
		Kind:        s.cfg.kind(),
		Category:    "mcp",
		Tags:        []string{"mcp", "mcp:" + s.name},
		Handler:     tools.HandlerFunc(s.call(mt.Name)),
	}
	if t.Description == "" && mt.Title != "" {
		t.Description = mt.Title
	}
	if a := mt.Annotations; a != nil {
		// Recorded as hints for listings; the kind above is what policy sees.
		t.Annotations = tools.Annotations{ReadOnly: a.ReadOnlyHint, Idempotent: a.IdempotentHint,
			Destructive: a.DestructiveHint == nil || *a.DestructiveHint, OpenWorld: a.OpenWorldHint == nil || *a.OpenWorldHint}
	}
	return t, nil
}

// call returns the handler calling the server's tool named remote.
func (s *source) call(remote string) func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
	return func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
		s.mu.Lock()
		cs := s.session
		s.mu.Unlock()
		if cs == nil {
			return &tools.Output{Content: fmt.Sprintf("MCP server %s is not connected (it is restarting)", s.name), IsError: true}, nil
		}
		args := c.Args
		if args == nil {
			args = map[string]any{}
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: remote, Arguments: args})
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err() // the pipeline reports the timeout or cancellation
			}
			return &tools.Output{Content: fmt.Sprintf("MCP server %s: %v", s.name, err), IsError: true}, nil
		}
		return output(res), nil
	}
}

// output flattens an MCP tool result to text: text blocks as they are,
// embedded text resources with their URI, other blocks described.
func output(r *mcp.CallToolResult) *tools.Output {
	var parts []string
	for _, c := range r.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s %s]", c.Name, c.URI))
		case *mcp.EmbeddedResource:
			if c.Resource == nil {
				continue
			}
			if c.Resource.Text != "" {
				parts = append(parts, fmt.Sprintf("[resource %s]\n%s", c.Resource.URI, c.Resource.Text))
			} else {
				parts = append(parts, fmt.Sprintf("[resource %s, %s, %d bytes: %s]", c.Resource.URI, c.Resource.MIMEType,
					len(c.Resource.Blob), base64.StdEncoding.EncodeToString(c.Resource.Blob[:min(len(c.Resource.Blob), 48)])))
			}
		default:
			b, _ := json.Marshal(c)
			parts = append(parts, string(b))
		}
	}
	out := &tools.Output{Content: strings.Join(parts, "\n"), IsError: r.IsError}
	if r.StructuredContent != nil {
		if b, err := json.Marshal(r.StructuredContent); err == nil {
			if out.Content == "" {
				out.Content = string(b)
			}
			out.Metadata = map[string]any{"structured_content": json.RawMessage(b)}
		}
	}
	return out
}

// transport is how to reach the server: its command over stdio, or its
// Streamable HTTP endpoint.
func (s *source) transport() (mcp.Transport, error) {
	if s.cfg.URL != "" {
		hdr := http.Header{}
		for k, v := range s.cfg.Headers {
			hdr.Set(k, os.ExpandEnv(v))
		}
		hc := &http.Client{Transport: headers{hdr, http.DefaultTransport}}
		return &mcp.StreamableClientTransport{Endpoint: os.ExpandEnv(s.cfg.URL), HTTPClient: hc, MaxRetries: -1}, nil
	}
	args := make([]string, len(s.cfg.Args))
	for i, a := range s.cfg.Args {
		args[i] = os.ExpandEnv(a)
	}
	path, err := exec.LookPath(os.ExpandEnv(s.cfg.Command))
	if err != nil {
		return nil, fmt.Errorf("command: %w", err)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = environ(s.cfg.Env)
	cmd.Stderr = &logWriter{log: s.log}
	return &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil
}

// environ is the environment of a server's command: a few variables of
// the worker's (so that PATH lookups and caches work) and the configured
// ones; secrets of the worker's environment do not leak into it.
func environ(extra map[string]string) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "USER", "LANG", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for _, k := range sortedKeys(extra) {
		env = append(env, k+"="+os.ExpandEnv(extra[k]))
	}
	return env
}

type headers struct {
	h    http.Header
	next http.RoundTripper
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, vs := range h.h {
		r.Header[k] = vs
	}
	return h.next.RoundTrip(r)
}

// logWriter logs what a server writes to stderr, a line at a time,
// bounded so a chatty server cannot flood the log.
type logWriter struct {
	log *slog.Logger
	mu  sync.Mutex
	n   int
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if w.n >= 1000 || line == "" {
			continue
		}
		w.n++
		if len(line) > 500 {
			line = line[:500] + "…"
		}
		w.log.Debug("mcp server stderr", "line", line)
	}
	return len(p), nil
}

func keys(m map[string]string) []string { return sortedKeys(m) }

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
