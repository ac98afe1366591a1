package toolctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/mcpserver"
)

// mcpStdio is the transport toolctl mcp serves on; tests swap it.
var mcpStdio = func() mcp.Transport { return &mcp.StdioTransport{} }

// cmdMCP serves the fleet's tools as an MCP server on stdin/stdout, as
// one agent: what an MCP client's mcpServers entry launches.
func cmdMCP(ctx context.Context, env *Env, args []string) int {
	fs := env.flagSet("mcp", "usage: toolctl [--nats URL] mcp [--agent NAME] [--creds FILE]: serve the tools as MCP on stdio")
	agent := fs.String("agent", env.Agent, "agent id the calls are made as (env TOOLGATE_AGENT)")
	creds := fs.String("creds", env.Creds, "the agent's NATS credentials file (env TOOLGATE_CREDS; default minted from this user's install)")
	approver := fs.String("approver", envOr("TOOLGATE_APPROVER", mcpserver.DefaultApproverURL), "approver URL named in the messages of parked calls (env TOOLGATE_APPROVER)")
	wait := fs.Duration("wait", mcpserver.DefaultCallWait, "how long one call may wait for its result, approvals included")
	verbose := fs.Bool("v", false, "log to stderr at debug level")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	env.Agent = *agent
	env.Creds = *creds
	nc, c, code := env.client()
	if c == nil {
		return code
	}
	defer nc.Close()
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	// stdout carries the protocol: logs go to stderr only.
	log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: level}))
	return serveMCP(ctx, env, mcpserver.Options{NC: nc, Client: c, ApproverURL: *approver, CallWait: *wait, Logger: log}, mcpStdio())
}

func serveMCP(ctx context.Context, env *Env, o mcpserver.Options, t mcp.Transport) int {
	s, err := mcpserver.New(o)
	if err != nil {
		return env.fail(ExitUsage, "%v", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	synced := make(chan error, 1)
	go func() { synced <- s.Sync(ctx) }()
	// Offer the tools from the first tools/list when a worker answers soon;
	// later changes reach the client as list_changed notifications.
	select {
	case <-s.Ready():
	case <-time.After(5 * time.Second):
		fmt.Fprintln(env.Stderr, "toolctl mcp: no worker listed the tools yet; serving, the list follows when one answers")
	case <-ctx.Done():
	}
	err = s.MCP().Run(ctx, t)
	cancel()
	if serr := <-synced; serr != nil {
		return env.fail(ExitNoReach, "%v", serr)
	}
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		return env.fail(ExitFailed, "mcp: %v", err)
	}
	return ExitOK
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
