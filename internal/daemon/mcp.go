package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bearer"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/mcpserver"
	"github.com/toolgate/toolgate/internal/mcpsource"
	"github.com/toolgate/toolgate/internal/remotesource"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools"
)

// DefaultMCPAgent is the agent id calls through the HTTP MCP face are made
// as with --mcp-insecure-loopback and no --mcp-agent.
const DefaultMCPAgent = "mcp"

// ErrMCPNoToken reports an MCP face asked to start with no token to
// authenticate its callers and without --mcp-insecure-loopback.
var ErrMCPNoToken = errors.New("no MCP token")

// startMCP serves the fleet's tools over Streamable HTTP at
// http://<o.MCPListen>/mcp until ctx is done. Every request carries a
// bearer token (internal/bearer) of an agent and is served as that agent,
// on its own bus connection and MCP sessions; with o.MCPInsecureLoopback,
// on a loopback address only, requests are taken without a token as agent
// o.MCPAgent. The returned channel yields the server's end.
func startMCP(ctx context.Context, url string, o Options) (<-chan error, error) {
	f := &mcpFace{ctx: ctx, url: url, o: o, agents: map[string]*mcpAgent{}}
	var allow func(string) bool
	if o.MCPCreds != "" {
		c, err := identity.LoadCreds(o.MCPCreds)
		if err != nil {
			return nil, fmt.Errorf("--mcp-creds: %w", err)
		}
		if o.MCPAgent != "" && o.MCPAgent != c.Name {
			return nil, fmt.Errorf("--mcp-creds %s are agent %q's, not --mcp-agent %q's", o.MCPCreds, c.Name, o.MCPAgent)
		}
		o.MCPAgent, f.o.MCPAgent = c.Name, c.Name
	}
	if o.MCPAgent != "" {
		allow = func(a string) bool { return a == o.MCPAgent }
	}
	tokens := o.MCPTokens
	if o.MCPInsecureLoopback {
		if o.MCPAgent == "" {
			o.MCPAgent, f.o.MCPAgent = DefaultMCPAgent, DefaultMCPAgent
		}
	} else {
		var agents []string
		var err error
		if tokens, agents, err = bearer.Holders(tokens); err != nil {
			return nil, fmt.Errorf("--mcp-tokens: %w", err)
		}
		usable := 0
		for _, a := range agents {
			if allow == nil || allow(a) {
				usable++
			}
		}
		if usable == 0 {
			who := "any agent"
			if o.MCPAgent != "" {
				who = "agent " + o.MCPAgent
			}
			return nil, fmt.Errorf("--mcp-listen: %w of %s in %s: mint one with `toolctl creds token AGENT` (its callers send Authorization: Bearer TOKEN), or give --mcp-insecure-loopback to take every local user's requests as one agent", ErrMCPNoToken, who, tokens)
		}
	}
	ln, err := net.Listen("tcp", o.MCPListen)
	if err != nil {
		return nil, fmt.Errorf("--mcp-listen %s: %w", o.MCPListen, err)
	}
	loop := mcpserver.IsLoopback(ln)
	var h http.Handler
	if o.MCPInsecureLoopback {
		if !loop {
			ln.Close()
			return nil, fmt.Errorf("--mcp-insecure-loopback: %s is not a loopback address; without a token only loopback is allowed", o.MCPListen)
		}
		// Fail at start, not at the first request, on credentials that do
		// not work.
		if _, err := f.agent(o.MCPAgent); err != nil {
			ln.Close()
			f.close()
			return nil, err
		}
		h = f
	} else {
		if o.MCPCreds != "" {
			if _, err := f.agent(o.MCPAgent); err != nil {
				ln.Close()
				f.close()
				return nil, err
			}
		}
		h = bearer.Require(tokens, allow, f)
	}
	mux := http.NewServeMux()
	mux.Handle(mcpserver.Path, h)
	done := make(chan error, 1)
	go func() { done <- mcpserver.Serve(ctx, mcpserver.Guard(mux, loop), ln) }()
	if o.MCPInsecureLoopback {
		fmt.Fprintf(o.Out, "toolgate: MCP (Streamable HTTP) on http://%s%s as agent %s, WITHOUT authentication (--mcp-insecure-loopback): every local user acts as %s\n", ln.Addr(), mcpserver.Path, o.MCPAgent, o.MCPAgent)
	} else {
		who := "the agent of each bearer token"
		if o.MCPAgent != "" {
			who = "agent " + o.MCPAgent
		}
		fmt.Fprintf(o.Out, "toolgate: MCP (Streamable HTTP) on http://%s%s as %s in %s (Authorization: Bearer TOKEN)\n", ln.Addr(), mcpserver.Path, who, tokens)
	}
	if o.MCPReady != nil {
		o.MCPReady("http://" + ln.Addr().String() + mcpserver.Path)
	}
	out := make(chan error, 1)
	go func() {
		err := <-done
		f.close()
		out <- err
	}()
	return out, nil
}

// mcpFace dispatches each request to the MCP server of its agent, made at
// the agent's first request.
type mcpFace struct {
	ctx context.Context
	url string
	o   Options

	mu     sync.Mutex
	agents map[string]*mcpAgent
	closed bool
	wg     sync.WaitGroup
}

// mcpAgent is one agent's MCP server: its own bus connection and sessions.
type mcpAgent struct {
	nc *nats.Conn
	h  http.Handler
	// ready is closed once the agent's tool list was first fetched.
	ready <-chan struct{}
	// waitUntil is when requests stop waiting for ready: readyWait
	// after the agent was connected.
	waitUntil time.Time
}

func (f *mcpFace) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	agent := bearer.AgentFrom(r.Context())
	if agent == "" {
		agent = f.o.MCPAgent // --mcp-insecure-loopback
	}
	a, err := f.agent(agent)
	if err != nil {
		f.o.Logger.Warn("mcp: agent's connection", "agent", agent, "err", err)
		http.Error(w, "toolgate cannot reach the bus as agent "+agent, http.StatusServiceUnavailable)
		return
	}
	// An agent's first requests wait for its tool list (a client lists
	// the tools right after initializing); readyWait after the agent was
	// connected, requests are served what there is, the rest follows as
	// list changes.
	select {
	case <-a.ready:
	default:
		if wait := time.Until(a.waitUntil); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-a.ready:
			case <-r.Context().Done():
				t.Stop()
				return
			case <-t.C:
			}
			t.Stop()
		}
	}
	a.h.ServeHTTP(w, r)
}

// readyWait bounds how long a request waits for its agent's first tool
// list.
const readyWait = 10 * time.Second

// agent returns the MCP server of agent, connecting it at first use.
func (f *mcpFace) agent(agent string) (*mcpAgent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a := f.agents[agent]; a != nil {
		return a, nil
	}
	if f.closed {
		return nil, errors.New("mcp: stopping")
	}
	nc, err := dialMCPAgent(f.url, f.o.MCPCreds, agent)
	if err != nil {
		return nil, err
	}
	c, err := client.New(nc, agent)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("agent %s: %w", agent, err)
	}
	s, err := mcpserver.New(mcpserver.Options{NC: nc, Client: c, ApproverURL: f.o.MCPApprover, Logger: f.o.Logger})
	if err != nil {
		nc.Close()
		return nil, err
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if err := s.Sync(f.ctx); err != nil {
			f.o.Logger.Error("mcp: tool list", "agent", agent, "err", err)
		}
	}()
	a := &mcpAgent{nc: nc, h: mcpserver.StreamHandler(s, f.o.Logger), ready: s.Ready(), waitUntil: time.Now().Add(readyWait)}
	f.agents[agent] = a
	return a, nil
}

// close waits for the agents' tool list upkeep (ended by ctx) and closes
// their connections.
func (f *mcpFace) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.wg.Wait()
	for _, a := range f.agents {
		a.nc.Close()
	}
}

// loadMCPConfig reads the --mcp-config file; nil when none is given.
func loadMCPConfig(path string) (*mcpsource.Config, error) {
	if path == "" {
		return nil, nil
	}
	c, err := mcpsource.Load(path)
	if err != nil {
		return nil, fmt.Errorf("--mcp-config: %w", err)
	}
	return c, nil
}

// mcpCommandsOutside refuses an MCP server whose command lies in a
// served root: the worker runs it unsandboxed, so an agent that could
// rewrite it would run code as the worker. (Its arguments may name the
// workspace: a filesystem server serves it by design.)
func mcpCommandsOutside(c *mcpsource.Config, roots ...string) error {
	if c == nil {
		return nil
	}
	for _, name := range c.Names() {
		s := c.Servers[name]
		if s.Command == "" {
			continue
		}
		path, err := exec.LookPath(os.ExpandEnv(s.Command))
		if err != nil {
			continue // reported when the server starts
		}
		if err := identity.CheckOutside(fmt.Sprintf("--mcp-config: the command of server %q", name), path, roots...); err != nil {
			return err
		}
	}
	return nil
}

// startMCPSources connects to the configured MCP servers and keeps their
// tools in reg until ctx is done; the channel closes once every server is
// stopped and its tools are unregistered.
func startMCPSources(ctx context.Context, c *mcpsource.Config, reg *tools.Registry, o Options) <-chan struct{} {
	fmt.Fprintf(o.Out, "toolgate: MCP servers %v (tools mcp__<server>__<tool>)\n", c.Names())
	done := make(chan struct{})
	go func() {
		defer close(done)
		mcpsource.Run(ctx, c, mcpsource.Options{Registry: reg, Logger: o.Logger})
	}()
	return done
}

// startRemoteTools discovers tools served as NATS micro services and keeps
// them in reg until ctx is done; the channel closes once they are
// unregistered. Refused announcements go to refused.
func startRemoteTools(ctx context.Context, nc *nats.Conn, reg *tools.Registry, o Options, refused func(events.ToolRefusedData)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		remotesource.Run(ctx, remotesource.Options{NC: nc, Registry: reg, Interval: o.RemoteInterval, Logger: o.Logger, OnRefused: refused})
	}()
	return done
}

// dialMCPAgent connects as the agent MCP calls are made as: with the
// credentials file given (--mcp-creds), else with credentials minted from
// this user's install for that agent (the worker's own identity may not
// make calls), else, for a URL carrying a password, with that.
func dialMCPAgent(url, credsFile, agent string) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("toolgate-mcp"), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}
	if credsFile == "" && !identity.HasUserInfo(url) {
		in, err := identity.LoadInstall()
		if err != nil {
			return nil, fmt.Errorf("--mcp-listen: credentials of agent %s: %w", agent, err)
		}
		c, err := in.MintCreds(identity.RoleAgent, agent)
		if err != nil {
			return nil, fmt.Errorf("--mcp-agent: %w", err)
		}
		nc, err := nats.Connect(url, append(opts, c.NATSOptions()...)...)
		if err != nil {
			return nil, fmt.Errorf("--mcp-listen: connect to NATS at %s as agent %s (give --mcp-creds when this machine does not hold the install's keys): %w", identity.RedactURL(url), agent, err)
		}
		return nc, nil
	}
	nc, _, err := identity.Dial(url, credsFile, identity.RoleAgent, agent, opts...)
	if err != nil {
		return nil, fmt.Errorf("--mcp-listen: %w", err)
	}
	return nc, nil
}
