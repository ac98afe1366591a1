// Command worker runs a toolgate worker. With no --nats it starts an
// embedded NATS server with JetStream, so nothing else is needed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/toolgate/toolgate/internal/bytesize"
	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/egress/relay"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/version"
)

func main() {
	relay.MaybeForward() // this program is also the relay inside bash's sandbox
	tuneGC()
	var o daemon.Options
	fs := flag.NewFlagSet("worker", flag.ExitOnError)
	fs.StringVar(&o.NATSURL, "nats", os.Getenv("NATS_URL"), "NATS server or cluster URL (env NATS_URL); empty starts an embedded server")
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:4222", "where the embedded NATS server listens")
	fs.StringVar(&o.DataDir, "data", "", "where the embedded NATS server stores its data (default the state directory, $XDG_STATE_HOME/toolgate)")
	fs.StringVar(&o.Creds, "creds", "", "worker credentials file (env TOOLGATE_CREDS; default minted from the state directory's keys)")
	fs.StringVar(&o.Workspace, "workspace", ".", "directory the tools are confined to")
	fs.StringVar(&o.PolicyFile, "policy", "", "policy file (YAML or JSON), reloaded when it changes; default: the fleet's shared policy (toolctl policy push), else the built-in one")
	fs.StringVar(&o.SkillsDir, "skills", "", "directory of SKILL.md files (default <workspace>/.skills)")
	fs.IntVar(&o.Concurrency, "concurrency", 0, "calls this worker runs at once (default 32 per CPU, at least 16)")
	fs.IntVar(&o.AgentConcurrency, "agent-concurrency", 0, "calls of one agent this worker runs at once; the agent's other calls wait their turn while other agents' run (default 3/4 of --concurrency; negative: no limit)")
	fs.StringVar(&o.Name, "name", "", "worker name in results and audit (default host-pid)")
	o.MaxPayload = 1 << 20
	fs.Var(bytesize.Var(&o.MaxPayload), "max-payload", "largest call message accepted (a `size`: 1MiB, 4MiB)")
	fs.DurationVar(&o.ShutdownGrace, "shutdown-grace", 0, "how long running calls may finish on SIGTERM (default 30s)")
	fs.IntVar(&o.Replicas, "replicas", 1, "stream replicas when provisioning a JetStream cluster")
	fs.Var(&o.Sandbox, "sandbox", "bash isolation: auto (bubblewrap when installed), require (refuse to start without it), off")
	fs.BoolVar(&o.NoPreparedSandboxes, "no-prepared-sandboxes", false, "build every bash call's sandbox on its call's path, instead of taking one started ahead for the same view")
	fs.IntVar(&o.Progress.PerSecond, "progress-rate", 0, "progress messages one call may publish a second (default 10)")
	fs.Var(bytesize.Var(&o.Progress.MaxBytes), "progress-max-bytes", "output in one progress message (a `size`; default 16KiB)")
	fs.IntVar(&o.BashLimits.Processes, "bash-processes", 0, "processes one bash call may hold at once (default 512 where the worker can bound a call; negative: no limit)")
	fs.Var(bytesize.Var(&o.BashLimits.Memory), "bash-memory", "memory one bash call may use, where the worker can make memory cgroups (a `size`: 8GiB, 512MiB; default 8GiB; negative: no limit)")
	trusted := fs.String("trusted-approvers", os.Getenv("TOOLGATE_TRUSTED_APPROVERS"), "comma-separated nkey public keys (U...) of approver services whose decisions are accepted besides the approvers this install created (env TOOLGATE_TRUSTED_APPROVERS); a key merely registered on the bus never counts")
	fs.StringVar(&o.MetricsListen, "metrics-listen", "", "serve /metrics (Prometheus), /healthz and /readyz on this address (e.g. 127.0.0.1:9464)")
	fs.DurationVar(&o.AuditRetention, "audit-retention", 0, "how long the audit stream keeps events (default 720h)")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	showVersion := fs.Bool("version", false, "print the version, commit and build date, and exit")
	healthcheck := fs.String("healthcheck", "", "GET this URL (e.g. http://127.0.0.1:9464/healthz), exit 0 when it answers 200 and 1 otherwise: a container image's HEALTHCHECK")
	fs.BoolVar(&o.NoRemoteTools, "no-remote-tools", false, "do not discover tools served as NATS micro services")
	fs.StringVar(&o.ToolsConfig, "tools-config", "", "tool overrides file (YAML): disable tools or set their kind, description, timeouts, whatever their source")
	fs.StringVar(&o.HooksFile, "hooks", "", "tool hooks file (YAML): before and after hooks, in-process or over NATS, and the redaction of secrets (on by default); give every worker the same file")
	fs.IntVar(&o.MaxQueuedCalls, "max-queued-calls", 0, "calls of one agent in the calls stream (queued, or waiting their turn) past which the worker refuses the agent's calls with an error naming the quota (default 1024; negative: no limit)")
	fs.IntVar(&o.MaxParked, "max-parked", 0, "calls of one agent waiting for people at once; more are refused with an error result (default 100; negative: no limit)")
	fs.StringVar(&o.MCPConfig, "mcp-config", "", "mcpServers file (Claude Code's format): the servers' tools join as mcp__<server>__<tool>")
	fs.StringVar(&o.MCPListen, "mcp-listen", "", "serve the tools as an MCP server over Streamable HTTP at http://ADDR/mcp (e.g. 127.0.0.1:8471)")
	fs.StringVar(&o.MCPAgent, "mcp-agent", "", "serve only this agent through --mcp-listen (with --mcp-insecure-loopback: every call is made as it; default mcp)")
	fs.StringVar(&o.MCPCreds, "mcp-creds", "", "credentials of the one agent --mcp-listen serves (default each token's agent's, minted from this user's install)")
	fs.StringVar(&o.MCPTokens, "mcp-tokens", "", "directory of the agents' bearer tokens --mcp-listen accepts (default <state dir>/tokens; mint with toolctl creds token AGENT)")
	fs.BoolVar(&o.MCPInsecureLoopback, "mcp-insecure-loopback", false, "serve --mcp-listen on a loopback address WITHOUT authentication, every request as --mcp-agent (any local user may call tools)")
	fs.StringVar(&o.MCPApprover, "mcp-approver", os.Getenv("TOOLGATE_APPROVER"), "approver URL named in MCP messages of parked calls (env TOOLGATE_APPROVER; default http://127.0.0.1:8470)")
	fs.StringVar(&o.SearchURL, "search-url", os.Getenv("TOOLGATE_SEARCH_URL"), "base URL of the Tavily-compatible search API web_search posts to (env TOOLGATE_SEARCH_URL; default https://api.tavily.com); its key is read from TAVILY_API_KEY")
	fs.Usage = func() { usage(fs) }
	if slices.ContainsFunc(os.Args[1:], func(a string) bool { return a == "-h" || a == "-help" || a == "--help" }) {
		fs.SetOutput(os.Stdout) // help asked for is the output, not an error
	}
	_ = fs.Parse(os.Args[1:])
	if *showVersion {
		fmt.Println(version.Get().String("worker"))
		return
	}
	if *healthcheck != "" {
		if err := telemetry.Probe(*healthcheck); err != nil {
			fmt.Fprintln(os.Stderr, "worker: healthcheck:", err)
			os.Exit(1)
		}
		return
	}
	o.SearchAPIKey = os.Getenv("TAVILY_API_KEY")
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "worker: unexpected argument %q (options are flags: worker --help)\n", fs.Arg(0))
		os.Exit(2)
	}
	logger, err := telemetry.NewLogger(*logFormat, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker: --log-format:", err)
		os.Exit(2)
	}
	o.Logger = logger
	o.Out = telemetry.Lines(*logFormat, os.Stderr, logger) // --log-format json: every line JSON
	for _, k := range strings.Split(*trusted, ",") {
		if k = strings.TrimSpace(k); k != "" {
			o.TrustedApprovers = append(o.TrustedApprovers, k)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := daemon.Run(ctx, o); err != nil {
		if *logFormat == "json" {
			logger.Error("worker stopped", "err", err)
		} else {
			fmt.Fprintln(os.Stderr, "worker:", err)
		}
		os.Exit(1)
	}
}

// usage is worker --help: what the worker does, its flags, examples.
func usage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprint(w, `usage: worker [FLAGS]

worker takes agents' tool calls from NATS JetStream, validates them, asks
the policy gate (allow, ask a person, deny), runs them confined to the
workspace (bash in a bubblewrap sandbox) and publishes signed results and
audit events. With no --nats it starts an embedded NATS server with
JetStream (--listen, --data) only this install's users can reach; keys and
credentials are made at first start in the state directory
($XDG_STATE_HOME/toolgate). It runs until SIGINT or SIGTERM, letting
running calls finish (--shutdown-grace).

flags:
`)
	fs.PrintDefaults()
	fmt.Fprint(w, `examples:
  worker                                   # embedded NATS, tools confined to the current directory
  worker --workspace ~/src/app --policy policy.yaml
  worker --nats nats://node-a:4222,nats://node-b:4222 --creds worker.creds --replicas 3
  worker --metrics-listen 127.0.0.1:9464   # /metrics, /healthz, /readyz
  worker --mcp-listen 127.0.0.1:8471       # the tools as an MCP server over Streamable HTTP
  worker --mcp-config mcp.json             # add the tools of MCP servers (Claude Code's mcpServers format)
  worker --version
then, from another terminal: toolctl call bash command='git status'
`)
}
