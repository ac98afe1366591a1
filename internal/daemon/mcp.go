package daemon

import (
	"context"
	"fmt"
	"net"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/mcpserver"
	"github.com/toolgate/toolgate/internal/mcpsource"
	"github.com/toolgate/toolgate/internal/remotesource"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/tools"
)

// DefaultMCPAgent is the agent id calls through the HTTP MCP face are made as.
const DefaultMCPAgent = "mcp"

// startMCP serves the fleet's tools over Streamable HTTP at
// http://<o.MCPListen>/mcp as agent o.MCPAgent, until ctx is done. The
// returned channel yields the server's end.
func startMCP(ctx context.Context, nc *nats.Conn, o Options) (<-chan error, error) {
	agent := o.MCPAgent
	if agent == "" {
		agent = DefaultMCPAgent
	}
	c, err := client.New(nc, agent)
	if err != nil {
		return nil, fmt.Errorf("--mcp-agent: %w", err)
	}
	s, err := mcpserver.New(mcpserver.Options{NC: nc, Client: c, ApproverURL: o.MCPApprover, Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", o.MCPListen)
	if err != nil {
		return nil, fmt.Errorf("--mcp-listen %s: %w", o.MCPListen, err)
	}
	done := make(chan error, 2)
	go func() { done <- s.Sync(ctx) }()
	go func() {
		done <- mcpserver.Serve(ctx, s, ln, o.Logger)
	}()
	fmt.Fprintf(o.Out, "toolgate: MCP (Streamable HTTP) on http://%s%s as agent %s\n", ln.Addr(), mcpserver.Path, agent)
	if o.MCPReady != nil {
		o.MCPReady("http://" + ln.Addr().String() + mcpserver.Path)
	}
	out := make(chan error, 1)
	go func() {
		e1, e2 := <-done, <-done
		if e1 == nil {
			e1 = e2
		}
		out <- e1
	}()
	return out, nil
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
// unregistered.
func startRemoteTools(ctx context.Context, nc *nats.Conn, reg *tools.Registry, o Options) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		remotesource.Run(ctx, remotesource.Options{NC: nc, Registry: reg, Interval: o.RemoteInterval, Logger: o.Logger})
	}()
	return done
}
