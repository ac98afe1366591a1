package daemon

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/identity"
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
func startMCP(ctx context.Context, url string, o Options) (<-chan error, error) {
	agent := o.MCPAgent
	if agent == "" {
		agent = DefaultMCPAgent
	}
	nc, err := dialMCPAgent(url, o.MCPCreds, agent)
	if err != nil {
		return nil, err
	}
	c, err := client.New(nc, agent)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("--mcp-agent: %w", err)
	}
	s, err := mcpserver.New(mcpserver.Options{NC: nc, Client: c, ApproverURL: o.MCPApprover, Logger: o.Logger})
	if err != nil {
		nc.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", o.MCPListen)
	if err != nil {
		nc.Close()
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
		defer nc.Close()
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
// unregistered.
func startRemoteTools(ctx context.Context, nc *nats.Conn, reg *tools.Registry, o Options) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		remotesource.Run(ctx, remotesource.Options{NC: nc, Registry: reg, Interval: o.RemoteInterval, Logger: o.Logger})
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
