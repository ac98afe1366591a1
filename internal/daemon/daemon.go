// Package daemon wires a worker process from its options: the embedded or
// remote NATS server, the registry of built-in tools, the policy gate, and
// the worker loop. cmd/worker only parses flags and calls Run.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/budget"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/delegate"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/parking"
	"github.com/toolgate/toolgate/internal/policyload"
	"github.com/toolgate/toolgate/internal/resultcache"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/tooloverride"
	"github.com/toolgate/toolgate/internal/worker"
	papproval "github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/eventsig"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tooldef"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/bash"
	"github.com/toolgate/toolgate/pkg/tools/builtin"
	"github.com/toolgate/toolgate/pkg/tools/workspace"
	"github.com/toolgate/toolgate/pkg/trust"
)

// Options configure a worker process. The zero value of each field means
// its default.
type Options struct {
	// NATSURL connects to an existing server or cluster; empty starts the
	// embedded server.
	NATSURL string
	// Listen is where the embedded server listens; default 127.0.0.1:4222.
	Listen string
	// DataDir holds the embedded server's storage; default the state
	// directory ($XDG_STATE_HOME/toolgate). Keys and credentials always
	// live in the state directory.
	DataDir string
	// Creds is the worker's .creds file; empty: $TOOLGATE_CREDS, else
	// credentials minted from the state directory's install (the embedded
	// server's, or a cluster configured with `toolctl nats-config`). A
	// NATSURL with a user or token in it uses that instead.
	Creds string
	// Workspace is the directory tools are confined to; default ".".
	Workspace string
	// SkillsDir holds SKILL.md files for the skill tool; default
	// <workspace>/.skills.
	SkillsDir string
	// Concurrency bounds calls run at once by this worker; default
	// worker.DefaultConcurrency().
	Concurrency int
	// AgentConcurrency bounds one agent's calls running at once on this
	// worker (worker.Config.AgentConcurrency): 0 the default (three
	// quarters of Concurrency), negative none.
	AgentConcurrency int
	// Name identifies the worker; default host-pid.
	Name string
	// MaxPayload bounds a call message in bytes; default 1 MiB.
	MaxPayload int
	// ShutdownGrace bounds how long running calls may finish on stop.
	ShutdownGrace time.Duration
	// Replicas for streams and buckets when provisioning a cluster.
	Replicas int
	// Sandbox is the bash tool's isolation: auto (default), require, off.
	Sandbox bash.Mode
	// NoPreparedSandboxes turns off the bash tool's sandboxes started
	// ahead of their calls (bash.Config.Prepared).
	NoPreparedSandboxes bool
	// Progress bounds the progress every call streams (messages a second,
	// bytes a message); the zero value is tools' defaults.
	Progress tools.ProgressLimit
	// BashLimits are the bash tool's resource limits (bash.Limits);
	// zero fields mean the defaults.
	BashLimits bash.Limits
	// PolicyFile is the policy document to follow (hot reloaded). Empty
	// follows the fleet's shared policy in KV (`toolctl policy push`), or
	// the built-in default when none was pushed.
	PolicyFile string
	// Cache turns on the result cache of read-only tools (the tools
	// config file's cache section sets it).
	Cache resultcache.Config
	// TrustedApprovers are the nkey public keys whose approval decisions
	// this worker accepts. Empty trusts the keys approver services
	// registered in the approvals bucket (zero-config; logged loudly).
	TrustedApprovers []string
	// TrustedAccounts are the account public keys (A...) whose user JWTs
	// vouch for approvers (decisions, amendments) and admins (pushed
	// policies): the toolgate account of this install, taken from the
	// worker's credentials. With neither these nor TrustedApprovers, every
	// decision, amendment and pushed policy is refused.
	TrustedAccounts []string
	// MaxParked bounds one agent's calls waiting for people at once
	// (parking.Options.MaxParkedPerAgent): 0 the default, negative none.
	MaxParked int
	// MaxQueuedCalls bounds one agent's calls in the calls stream past
	// which the intake refuses its calls (worker.Config.MaxQueuedCalls):
	// 0 the default, negative none.
	MaxQueuedCalls int
	// MCPListen, when set, serves the fleet's tools as an MCP server over
	// Streamable HTTP at http://<MCPListen>/mcp.
	MCPListen string
	// MCPAgent, when set, is the only agent the MCP face serves; with
	// MCPInsecureLoopback every request is made as it (default "mcp").
	MCPAgent string
	// MCPCreds is that agent's credentials file; empty mints each agent's
	// from this user's install.
	MCPCreds string
	// MCPTokens is the directory of the agents' bearer tokens the MCP face
	// accepts (internal/bearer); default <state dir>/tokens.
	MCPTokens string
	// MCPInsecureLoopback serves the MCP face without authentication, on a
	// loopback address only, as MCPAgent: every local user may use it.
	MCPInsecureLoopback bool
	// MCPApprover is the approver URL named in MCP messages of parked calls.
	MCPApprover string
	// MCPReady, if set, is called with the MCP endpoint URL once it listens.
	MCPReady func(url string)
	// MCPConfig is an mcpServers file (Claude Code's format) whose servers'
	// tools join the registry as mcp__<server>__<tool>.
	MCPConfig string
	// NoRemoteTools turns off the discovery of tools served as NATS micro
	// services (pkg/remote).
	NoRemoteTools bool
	// RemoteInterval is how often remote tools are discovered; default 5s.
	RemoteInterval time.Duration
	// SearchAPIKey is web_search's API key (Tavily's, TAVILY_API_KEY);
	// empty leaves web_search out.
	SearchAPIKey string
	// SearchURL is the base URL of the search API; empty means Tavily's.
	SearchURL string
	// ToolsConfig is a tool overrides file (internal/tooloverride): the
	// operator's last word on every tool, whatever its source.
	ToolsConfig string
	// HooksFile is a tool hooks file (pkg/hooks): before and after hooks,
	// in-process or remote, and the built-in redaction of secrets (on
	// without a file).
	HooksFile string
	// Logger receives logs; default a text logger on stderr.
	Logger *slog.Logger
	// Out receives the start-up banner; default stderr.
	Out io.Writer
	// Ready, if set, is called with the NATS URL once the worker takes
	// calls (tests and embedding programs use it).
	Ready func(natsURL string)

	// MetricsListen, when set, serves /metrics, /healthz and /readyz there.
	MetricsListen string
	// AuditRetention is how long audit events are kept; default 30 days.
	AuditRetention time.Duration
	// Telemetry, if set, is used instead of the OTEL_* environment's.
	Telemetry *telemetry.Telemetry
}

// Run runs a worker process until ctx is done, then shuts down cleanly.
func Run(ctx context.Context, o Options) error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if o.Out == nil {
		o.Out = os.Stderr
	}
	ws, err := workspaceDir(o.Workspace)
	if err != nil {
		return err
	}
	if err := trustedOutside(o, ws); err != nil {
		return err
	}
	hooksCfg, err := loadHooks(o)
	if err != nil {
		return err
	}
	sb, err := bash.Detect(o.Sandbox)
	if err != nil {
		return err // require without a working bubblewrap: refuse to start
	}
	if sb.Enabled() {
		fmt.Fprintf(o.Out, "toolgate: bash sandbox: %s\n", sb)
	} else {
		fmt.Fprintf(o.Out, "toolgate: WARNING: bash sandbox: %s; install bubblewrap (apt-get install -y bubblewrap) or run with --sandbox require to refuse this\n", sb)
	}
	nc, url, creds, srv, err := connect(o, ws)
	if err != nil {
		return err
	}
	if creds != nil {
		o.Logger.Info("connected to NATS", "identity", creds.String(), "account", creds.Account)
	}
	if len(o.TrustedAccounts) == 0 && creds != nil {
		// The install's approvers and admins: users of the account that
		// issued this worker's own credentials (none with password auth:
		// then only pinned approver keys count).
		o.TrustedAccounts = []string{creds.Account}
	}
	if srv != nil {
		defer srv.Close()
	}
	defer nc.Close()

	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	busCfg := bus.Config{Replicas: o.Replicas, AuditMaxAge: o.AuditRetention, MaxPayload: int32(min(o.MaxPayload, math.MaxInt32))}
	if err := bus.ProvisionWait(ctx, js, busCfg, o.Logger); err != nil {
		return err
	}
	policyKV, err := js.KeyValue(ctx, bus.BucketPolicy)
	if err != nil {
		return err
	}

	// The policy gate: a file, the fleet's shared KV key, or the default.
	gate := policy.NewGate(nil)
	admins, err := trust.NewVerifier(o.TrustedAccounts, nil)
	if err != nil {
		return fmt.Errorf("trusted accounts: %w", err)
	}
	var changes []policyload.Change
	mark, err := policyMark(o)
	if err != nil {
		return err
	}
	loader := &policyload.Loader{Gate: gate, File: o.PolicyFile, KV: policyKV, Verifier: admins, Logger: o.Logger, Mark: mark,
		OnChange: func(ch policyload.Change) { changes = append(changes, ch) }}
	first, err := loader.Load(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "toolgate: policy %s (revision %s)\n", first.Source, first.Revision)

	roots := extraRoots(gate, o.Logger)
	if err := stateOutside(o, roots); err != nil {
		return err
	}
	reg := tools.NewRegistry()
	if o.ToolsConfig != "" {
		ov, err := tooloverride.Load(o.ToolsConfig)
		if err != nil {
			return fmt.Errorf("--tools-config: %w", err)
		}
		reg.SetOverride(ov.Apply)
		if ov.Cache.Enabled {
			o.Cache = resultcache.Config{Enabled: true, TTL: ov.Cache.TTL}
		}
	}
	if err := builtin.Register(reg, builtin.Config{Workspace: ws, SkillsDir: o.SkillsDir, Roots: roots}); err != nil {
		return fmt.Errorf("register built-in tools: %w", err)
	}
	proxy, err := bashProxy(gate, o.Logger)
	network := func(c *tools.Call) bool { return networkGranted(gate, c) }
	if err != nil {
		o.Logger.Warn("bash calls get no network even where the policy grants it", "err", err)
		network = nil
	}
	bash, err := bash.New(bash.Config{Workspace: ws, Sandbox: o.Sandbox, Logger: o.Logger, Limits: o.BashLimits,
		Hide: hiddenState(o, sb.Enabled()), NetworkAllowed: network, Proxy: proxy, Prepared: !o.NoPreparedSandboxes})
	if err != nil {
		return fmt.Errorf("bash tool: %w", err)
	}
	if err := reg.Register(bash); err != nil {
		return err
	}
	if err := reg.Register(papproval.ClarifyTool()); err != nil {
		return err
	}
	if err := registerWeb(reg, gate, o); err != nil {
		return err
	}
	mcpCfg, err := loadMCPConfig(o.MCPConfig)
	if err != nil {
		return err
	}
	if err := mcpCommandsOutside(mcpCfg, append([]string{ws}, roots...)...); err != nil {
		return err
	}
	// Stored results and audit events count when a worker of the trusted
	// accounts, or of this worker's own, signed them.
	workerAccounts := o.TrustedAccounts
	if creds != nil {
		workerAccounts = append(slices.Clone(workerAccounts), creds.Account)
	}
	workers, err := trust.NewVerifier(workerAccounts, nil)
	if err != nil {
		return err
	}
	budgets, err := budget.New(ctx, js, budget.Config{Worker: o.Name, Logger: o.Logger, Audit: eventsig.New(workers),
		Budgets: func() []policy.Budget { return gate.Policy().Budgets() }})
	if err != nil {
		return err
	}
	dlg, err := delegate.New(ctx, nc, js, delegate.Config{Worker: o.Name, Registry: reg, Logger: o.Logger})
	if err != nil {
		return err
	}
	if err := reg.Register(dlg.Tool()); err != nil {
		return err
	}
	// Delegation first (it sets the budget key of a task's calls), then
	// budgets, then progress, and the cache innermost.
	mws := []tools.Middleware{dlg.Middleware, budgets.Middleware(), o.Progress.Middleware()}
	if o.Cache.Enabled {
		cache, err := resultcache.New(ctx, js, o.Cache, o.Logger, ws, roots...)
		if err != nil {
			return err
		}
		defer cache.Close()
		mws = append(mws, cache.Middleware)
		o.Logger.Info("result cache on", "ttl", o.Cache.TTL)
	}
	tel, stopTelemetry, err := startTelemetry(ctx, o)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	chain, err := buildHooks(hooksCfg, o, nc, creds, tel)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "toolgate: tool hooks: %s\n", hooksCfg)
	pipe := tools.NewPipeline(reg, tools.WithGate(gate), tools.WithWorkspace(ws), tools.WithLogger(o.Logger),
		tools.WithHooks(chain.Before(), chain.After()), tools.Use(mws...))
	mgr, err := parking.NewManager(ctx, js, parking.Options{Name: o.Name, TrustedKeys: o.TrustedApprovers,
		TrustedAccounts: o.TrustedAccounts, EditJudge: worker.JudgeEdit(pipe), MaxParkedPerAgent: o.MaxParked, Logger: o.Logger})
	if err != nil {
		return err
	}
	w, err := worker.New(nc, pipe, worker.Config{
		Name: o.Name, Concurrency: o.Concurrency, AgentConcurrency: o.AgentConcurrency, MaxPayload: o.MaxPayload, MaxQueuedCalls: o.MaxQueuedCalls, ShutdownGrace: o.ShutdownGrace,
		Bus: busCfg, Logger: o.Logger, Parker: worker.ManagerParker{M: mgr, Preview: preview(ws, roots, gate)},
		Telemetry: tel, Budgeted: budgets.Applies, Signer: signer(o, creds), Verifier: eventsig.New(workers),
		Redact: chain.Redact,
	})
	if err != nil {
		return err
	}
	metricsCtx, stopMetrics := context.WithCancel(context.Background())
	defer stopMetrics()
	if err := serveMetrics(metricsCtx, o, tel, js, w, mgr); err != nil {
		return err
	}
	// From now on every policy change is announced on the bus.
	loader.OnChange = func(ch policyload.Change) { w.PolicyChanged(policyChange(ch)) }
	for _, ch := range changes {
		w.PolicyChanged(policyChange(ch))
	}
	bg, bgCancel := context.WithCancel(context.Background())
	defer bgCancel()
	go loader.Watch(bg)
	go budgets.Run(bg)
	go func() {
		err := parking.WatchPolicyAmendments(bg, policyKV, o.Logger, mgr, gate.SetAmendments)
		if err != nil && bg.Err() == nil {
			o.Logger.Error("watch amendments", "err", err)
		}
	}()
	mctx, mcancel := context.WithCancel(context.Background())
	mdone := make(chan error, 1)
	go func() { mdone <- mgr.Run(mctx, w.Resume) }()
	defer func() {
		mcancel()
		if err := <-mdone; err != nil {
			o.Logger.Error("approvals", "err", err)
		}
	}()
	if !o.NoRemoteTools {
		rdone := startRemoteTools(bg, nc, reg, o, w.ToolRefused)
		defer func() { bgCancel(); <-rdone }()
	}
	if mcpCfg != nil {
		sdone := startMCPSources(bg, mcpCfg, reg, o)
		defer func() { bgCancel(); <-sdone }()
	}
	if o.MCPListen != "" {
		mdone, err := startMCP(bg, url, o)
		if err != nil {
			return err
		}
		defer func() { bgCancel(); <-mdone }()
	}
	fmt.Fprintf(o.Out, "toolgate: workspace %s; tools: %v\n", ws, reg.Names())
	if o.Ready != nil {
		w.OnReady(func() { o.Ready(url) })
	}
	if err := w.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func workspaceDir(dir string) (string, error) {
	if dir == "" {
		dir = "."
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("--workspace %q: %w", dir, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("--workspace %q: %w", dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("--workspace %q is not a directory", dir)
	}
	return abs, nil
}

// extraRoots are the directories beyond the workspace the policy's
// allowed_paths grant to any file tool; the gate still judges each path.
// Roots are fixed at start; a policy that adds one needs a restart.
func extraRoots(g *policy.Gate, log *slog.Logger) []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range append(tooldef.WithPath(tooldef.Reads, ""), tooldef.WithPath(tooldef.Writes, "")...) {
		for _, r := range g.AllowedRoots("", t) {
			if seen[r] {
				continue
			}
			seen[r] = true
			if fi, err := os.Stat(r); err != nil || !fi.IsDir() {
				log.Warn("allowed path is not a directory; not opened as a root", "path", r)
				continue
			}
			out = append(out, r)
		}
	}
	return out
}

// networkGranted reports whether the policy grants the network kind to
// the calling agent: bash commands get a network only then. Only a rule
// that names it grants it (kinds.network, kind:network in allow, an
// agent overlay's); a catch-all default allow does not.
func networkGranted(g *policy.Gate, c *tools.Call) bool {
	d := g.Evaluate(context.Background(), policy.Request{Agent: c.Agent, Tool: "network", Known: true, Kind: policy.KindNetwork,
		Arguments: map[string]any{}})
	return d.Action == policy.Allow && !strings.HasSuffix(d.Rule, "default") && !strings.HasPrefix(d.Rule, "builtin.")
}

// preview shows a person what a parked write or edit would change: the
// diff against the file as it is now, read confined to the workspace and
// judged by the gate's path rules like the tool's own read. The tool's
// definition says which argument is the path, the new content, the text
// replaced and its replacement.
func preview(ws string, roots []string, gate *policy.Gate) func(c *tools.Call) string {
	return func(c *tools.Call) string {
		if c.Tool == nil {
			return ""
		}
		d, ok := tooldef.Lookup(c.Tool.Name)
		if !ok || d.Name != c.Tool.Name {
			return ""
		}
		pa := d.Arg(tooldef.Path)
		content, from, to := d.Arg(tooldef.Content), d.Arg(tooldef.OldText), d.Arg(tooldef.NewText)
		if pa == nil || pa.Access != tooldef.Writes || (content == nil && (from == nil || to == nil)) {
			return ""
		}
		path, _ := c.Args[pa.Name].(string)
		if path == "" {
			return ""
		}
		w, err := workspace.Open(ws, roots...)
		if err != nil {
			return ""
		}
		defer w.Close()
		req := policy.Request{Agent: c.Agent, Tool: c.Tool.Name, Known: true, Kind: c.Tool.Kind, Arguments: c.Args, Workspace: ws}
		check := func(real string) error {
			if d := gate.CheckPath(req, real); d.Action == policy.Deny {
				return errors.New(d.Reason)
			}
			return nil
		}
		var old string
		data, _, err := w.ReadFile(path, 4<<20, check)
		switch {
		case err == nil:
			old = string(data)
		case errors.Is(err, fs.ErrNotExist):
		default:
			return ""
		}
		var updated string
		if content != nil {
			updated, _ = c.Args[content.Name].(string)
		} else {
			oldText, _ := c.Args[from.Name].(string)
			newText, _ := c.Args[to.Name].(string)
			if oldText == "" || !strings.Contains(old, oldText) {
				return ""
			}
			n := 1
			if all, _ := c.Args["replace_all"].(bool); all {
				n = -1
			}
			updated = strings.Replace(old, oldText, newText, n)
		}
		return papproval.UnifiedDiff(path, old, updated)
	}
}

func policyChange(ch policyload.Change) events.PolicyChangeData {
	d := events.PolicyChangeData{Source: ch.Source, Revision: ch.Revision}
	if ch.Err != nil {
		d.Errors = strings.Split(ch.Err.Error(), "\n")
	}
	for _, w := range ch.Warnings {
		d.Warnings = append(d.Warnings, w.String())
	}
	return d
}

// signer is the key and JWT the worker signs its results and audit
// events with: its own credentials' key; for credentials it minted from
// its install (no NATS URL given), the install's signing JWT for that
// key (identity.Install.SigningJWT: the same identity, permitting
// nothing, under a third of the length), else its credentials' JWT. Without
// credentials (a URL that carries a user or token) there is none, and
// readers refuse what it publishes.
func signer(o Options, creds *identity.Creds) trust.Signer {
	if creds == nil {
		return trust.Signer{}
	}
	s := trust.Signer{Key: creds.Key, JWT: creds.JWT}
	if o.NATSURL != "" {
		return s
	}
	in, err := identity.LoadInstall()
	if err == nil {
		var j string
		if j, err = in.SigningJWT(creds); err == nil {
			s.JWT = j
		}
	}
	if err != nil {
		o.Logger.Warn("signing with the credentials' own JWT", "err", err)
	}
	return s
}

// policyMarkFile is the file, in the data directory (else the state
// directory), holding the newest pushed policy the worker applied
// (policyload.Loader.Mark).
const policyMarkFile = "policy-applied.json"

// policyMark is the path of the worker's policy high-water mark.
func policyMark(o Options) (string, error) {
	dir := o.DataDir
	if dir == "" {
		var err error
		if dir, err = identity.StateDir(); err != nil {
			return "", fmt.Errorf("policy high-water mark: %w", err)
		}
	}
	return filepath.Join(dir, policyMarkFile), nil
}
