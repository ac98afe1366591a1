// Package toolctl is the command line for people: call a tool, list the
// tools, follow events, and (through the policy and approvals commands)
// check policies and decide parked calls. cmd/toolctl only calls Run.
package toolctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// Exit codes, the same for every command (README "Exit codes").
const (
	ExitOK      = 0 // done; the call's status is ok
	ExitFailed  = 1 // the call failed (status error, timeout, interrupted) or the command could not do its work
	ExitUsage   = 2 // bad command line, or credentials that do not fit
	ExitNoReach = 3 // could not reach NATS, a worker or the approver in time
	ExitDenied  = 4 // the policy gate denied the call
	// ExitWithdrawn: the call will not run: a person rejected it, no
	// decision came before its deadline, or it was cancelled.
	ExitWithdrawn = 5
	// ExitChanged: toolctl policy replay found calls whose action the
	// policy would change.
	ExitChanged = 6
	// ExitInterrupted: toolctl was interrupted (Ctrl-C, SIGTERM); a call
	// it was waiting for is cancelled.
	ExitInterrupted = 130
)

// StatusExit is the exit code for a call's final status.
func StatusExit(s events.Status) int {
	switch s {
	case events.StatusOK:
		return ExitOK
	case events.StatusDenied:
		return ExitDenied
	case events.StatusRejected, events.StatusExpired, events.StatusCancelled:
		return ExitWithdrawn
	}
	return ExitFailed
}

// Env is what a command runs with.
type Env struct {
	Stdout, Stderr io.Writer
	NATSURL        string
	Agent          string
	// Creds is the --creds file (default $TOOLGATE_CREDS); empty mints
	// credentials from the state directory's install: an agent's for
	// call and tools, an admin's for the rest.
	Creds string
	// agentSet is whether --agent or $TOOLGATE_AGENT named the agent.
	agentSet bool
	// account is the account that issued the credentials connected
	// with: whose workers' signed results and audit events count.
	account string
}

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *Env, args []string) int
	// examples are command lines shown by `toolctl help NAME`.
	examples []string
}

// Extra lets other packages add commands (policy, approvals) without this
// package importing them.
type Extra struct {
	Name    string
	Summary string
	// Run gets the arguments after the command name and the global flags.
	Run func(ctx context.Context, env *Env, args []string) int
	// Examples are command lines shown by `toolctl help NAME`.
	Examples []string
}

// Run runs toolctl with args (without the program name).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, extra ...Extra) int {
	env := &Env{Stdout: stdout, Stderr: stderr}
	cmds := []command{
		{"call", "call TOOL key=value ... | --json '{...}': run a tool and print its output", cmdCall, []string{
			"toolctl call read path=README.md",
			"toolctl call bash command='go test ./...' --follow",
			`toolctl call --json '{"path":"README.md","limit":3}' read`}},
		{"tools", "list the tools the workers offer", cmdTools, []string{"toolctl tools", "toolctl tools --format openai"}},
		{"events", "print results, domain and audit events (--follow: the stored ones first, then new ones; --new: new ones only)", cmdEvents, []string{"toolctl events --follow", "toolctl events --new"}},
		{"audit", "print the audit trail: decisions and executions [--follow] [--agent A] [--tool T] [--since D]", cmdAudit,
			[]string{"toolctl audit --tool bash --since 1h"}},
		{"cancel", "CALL_ID: cancel a call of the agent, queued, parked or running", cmdCancel, []string{"toolctl cancel CALL_ID"}},
		{"budgets", "budget usage against the policy's limits [--agent A] [--session S]", cmdBudgets, []string{"toolctl budgets --agent agent-7"}},
		{"session", "ID: a session's calls as a tree, each task call with its sub-agent's calls [--since D] [--json]", cmdSession,
			[]string{"toolctl session SESSION_ID"}},
		{"policy", "check | lint | test | replay | default | push FILE | amendments: the policy gate", cmdPolicy, []string{
			"toolctl policy default > policy.yaml", "toolctl policy lint policy.yaml", "toolctl policy test policy.yaml",
			"toolctl policy replay policy.yaml --since 24h --html replay.html",
			`toolctl policy check --policy policy.yaml --tool bash --args '{"command":"git push"}'`}},
		{"approvals", "list | show | approve | reject | answer: calls waiting for people", cmdApprovals, []string{
			"toolctl approvals list", `toolctl approvals approve CALL_ID --comment "looks right"`}},
		{"creds", "agent|approver|admin|worker|tool|hook NAME... [--out FILE|-] [--out-dir DIR] | token AGENT | login PERSON...: mint .creds files (0600), a bearer token or approver logins", cmdCreds,
			[]string{"toolctl creds agent agent-7 --expires 24h", "toolctl creds agent a1 a2 a3 --out-dir DIR", "toolctl creds token claude-code"}},
		{"nats-config", "[--out DIR]: auth.conf for every nats-server node, and worker/approver/admin creds", cmdNATSConfig,
			[]string{"toolctl nats-config --out DIR"}},
		{"mcp", "serve the tools as an MCP server on stdio (an agent's mcpServers entry runs this)", cmdMCP,
			[]string{"toolctl mcp --agent claude-code"}},
		{"hook", "claude | codex | serve: judge an agent's own tool calls by the policy (PreToolUse hooks)", cmdHook,
			[]string{"toolctl hook claude"}},
		{"help", "[COMMAND]: this list, or how to use a command, with examples", nil, []string{"toolctl help call"}},
	}
	for _, e := range extra {
		cmds = append(cmds, command{e.Name, e.Summary, e.Run, e.Examples})
	}
	fs := flag.NewFlagSet("toolctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	defURL := os.Getenv("NATS_URL")
	if defURL == "" {
		defURL = nats.DefaultURL
	}
	defAgent := os.Getenv("TOOLGATE_AGENT")
	if defAgent == "" {
		defAgent = "toolctl"
	}
	fs.StringVar(&env.NATSURL, "nats", defURL, "NATS URL (env NATS_URL)")
	fs.StringVar(&env.Agent, "agent", defAgent, "agent id to act as (env TOOLGATE_AGENT)")
	fs.StringVar(&env.Creds, "creds", os.Getenv(identity.EnvCreds), "NATS credentials file (env TOOLGATE_CREDS; default minted from the state directory's keys)")
	cmds = append(cmds, shipCommands(&cmds, fs)...)
	usage := func(w io.Writer) {
		fmt.Fprintln(w, "usage: toolctl [--nats URL] [--creds FILE] [--agent ID] COMMAND [ARGS]")
		fmt.Fprintln(w, "commands:")
		for _, c := range cmds {
			fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
		}
		fmt.Fprintln(w, "flags (before or after the command; -- ends them):")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
		fmt.Fprintln(w, "examples:")
		for _, c := range cmds[:3] {
			fmt.Fprintf(w, "  %s\n", c.examples[0])
		}
		fmt.Fprint(w, exitCodesHelp)
		fmt.Fprintln(w, "toolctl help COMMAND (or toolctl COMMAND --help) describes a command.")
	}
	fs.Usage = func() {} // printed below, where it belongs
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		return cmdVersion(ctx, env, args[1:])
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout) // asked for: not an error
			return ExitOK
		}
		usage(stderr)
		return ExitUsage
	}
	env.agentSet = os.Getenv("TOOLGATE_AGENT") != ""
	fs.Visit(func(f *flag.Flag) { env.agentSet = env.agentSet || f.Name == "agent" })
	if fs.NArg() == 0 {
		usage(stderr)
		return ExitUsage
	}
	name := fs.Arg(0)
	// Global flags may also follow the command: `toolctl call read
	// path=x --nats URL`. policy check and audit have an --agent of
	// their own (the agent judged, the agent whose calls are shown).
	var own []string
	if name == "policy" && fs.NArg() > 1 && (fs.Arg(1) == "check" || fs.Arg(1) == "replay") || name == "audit" || name == "budgets" {
		own = []string{"agent"}
	}
	rest, err := takeGlobals(fs, fs.Args()[1:], own...)
	if err != nil {
		return ExitUsage
	}
	if name == "help" {
		if len(rest) == 0 {
			usage(stdout)
			return ExitOK
		}
		name, rest = rest[0], []string{"--help"}
	}
	for _, c := range cmds {
		if c.name != name || c.run == nil {
			continue
		}
		if !asksHelp(rest) {
			code := c.run(ctx, env, rest)
			if code != ExitOK && ctx.Err() != nil {
				fmt.Fprintln(stderr, "toolctl: interrupted")
				return ExitInterrupted
			}
			return code
		}
		// Help asked for is the output, on stdout.
		help := *env
		help.Stderr = stdout
		code := c.run(ctx, &help, rest)
		if len(c.examples) > 0 {
			fmt.Fprintln(stdout, "examples:")
			for _, e := range c.examples {
				fmt.Fprintf(stdout, "  %s\n", e)
			}
		}
		return code
	}
	fmt.Fprintf(stderr, "toolctl: unknown command %q\n", name)
	usage(stderr)
	return ExitUsage
}

// Connect opens a NATS connection for a command as an admin, with a
// clear error.
func (e *Env) Connect() (*nats.Conn, error) { return e.connectAs(identity.RoleAdmin, "admin") }

func (e *Env) connectAs(role identity.Role, name string) (*nats.Conn, error) {
	nc, _, err := e.connectCreds(role, name)
	return nc, err
}

// connectCreds connects as connectAs does and returns the credentials
// used (nil when the URL carries a password).
func (e *Env) connectCreds(role identity.Role, name string) (*nats.Conn, *identity.Creds, error) {
	nc, creds, err := identity.Dial(e.NATSURL, e.Creds, role, name, nats.Name("toolctl"), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, nil, withHint(err)
	}
	if creds != nil {
		e.account = creds.Services
	}
	return nc, creds, nil
}

// withHint adds how to start a worker when no server answered.
func withHint(err error) error {
	if errors.Is(err, nats.ErrNoServers) {
		return fmt.Errorf("%w (is a worker running? start one with `go run ./cmd/worker`)", err)
	}
	return err
}

// exitCode is ExitUsage for credentials that do not fit (the server's
// refusal included), else ExitNoReach.
func exitCode(err error) int {
	if errors.Is(err, identity.ErrBadCreds) || errors.Is(err, identity.ErrWrongIdentity) || errors.Is(err, identity.ErrBadName) ||
		errors.Is(err, nats.ErrAuthorization) {
		return ExitUsage
	}
	return ExitNoReach
}

// client connects as the agent and returns its client, or a nil client
// and the exit code after saying what went wrong. With a --creds file the
// agent is the one the credentials name.
func (e *Env) client() (*nats.Conn, *client.Client, int) {
	nc, err := e.connectAgent()
	if err != nil {
		return nil, nil, e.fail(exitCode(err), "%v", err)
	}
	c, err := client.New(nc, e.Agent, client.WithTrustedAccounts(e.trusted()...))
	if err != nil {
		nc.Close()
		return nil, nil, e.fail(ExitUsage, "--agent: %v", err)
	}
	return nc, c, ExitOK
}

// connectAgent connects as the agent (--agent, or the one a --creds file
// names, which then becomes e.Agent).
func (e *Env) connectAgent() (*nats.Conn, error) {
	name := e.Agent
	if e.Creds != "" && !e.agentSet {
		name = ""
	}
	if name != "" {
		if err := identity.ValidName(name); err != nil {
			return nil, fmt.Errorf("--agent: %w", err)
		}
	}
	nc, creds, err := identity.Dial(e.NATSURL, e.Creds, identity.RoleAgent, name, nats.Name("toolctl"), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, withHint(err)
	}
	if creds != nil {
		e.Agent, e.account = creds.Name, creds.Services
	}
	return nc, nil
}

// trusted is the accounts whose workers' signatures count: the one that
// issued the credentials connected with; none known leaves the default
// (client.WithTrustedAccounts).
func (e *Env) trusted() []string {
	if e.account == "" {
		return nil
	}
	return []string{e.account}
}

// jetStream connects and returns the JetStream API, or nil and the exit
// code after saying what went wrong.
func (e *Env) jetStream() (*nats.Conn, jetstream.JetStream, int) {
	nc, err := e.Connect()
	if err != nil {
		return nil, nil, e.fail(exitCode(err), "%v", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, e.fail(ExitNoReach, "%v", err)
	}
	return nc, js, ExitOK
}

func (e *Env) fail(code int, format string, a ...any) int {
	fmt.Fprintf(e.Stderr, "toolctl: "+format+"\n", a...)
	return code
}

func cmdCall(ctx context.Context, env *Env, args []string) int {
	fs := env.flagSet("call", "usage: toolctl call TOOL [key=value | key:=json ...] [flags]\n       toolctl call TOOL --json '{...}' [flags]\n       toolctl call TOOL ... --follow (print progress as it arrives)\nflags may come before or after the tool; -- ends them")
	raw := fs.String("json", "", "arguments as one JSON object")
	id := fs.String("id", "", "call id (default: a new unique id)")
	session := fs.String("session", "", "session id")
	timeout := fs.Duration("timeout", 0, "tool timeout (default: the tool's)")
	wait := fs.Duration("wait", 15*time.Minute, "how long to wait for the result")
	full := fs.Bool("result", false, "print the whole result as JSON")
	follow := fs.Bool("follow", false, "print the call's progress (partial output) as it arrives, then the result")
	words, code, ok := parseWords(fs, args, 1, -1)
	if !ok {
		return code
	}
	tool, kv := words[0], words[1:]
	nc, c, code := env.client()
	if c == nil {
		return code
	}
	defer nc.Close()
	var arguments json.RawMessage
	switch {
	case *raw != "" && len(kv) > 0:
		return env.fail(ExitUsage, "give arguments either as key=value or with --json, not both")
	case *raw != "":
		if !json.Valid([]byte(*raw)) {
			return env.fail(ExitUsage, "--json is not valid JSON: %s", *raw)
		}
		arguments = json.RawMessage(*raw)
	default:
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		list, _ := c.Tools(lctx)
		cancel()
		m, err := ParseArgs(kv, propertyTypes(list, tool))
		if err != nil {
			return env.fail(ExitUsage, "%v", err)
		}
		arguments, _ = json.Marshal(m)
	}
	opts := []client.CallOption{client.OnPending(func(r events.ResultData) {
		fmt.Fprintf(env.Stderr, "toolctl: call %s is parked: %s (toolctl approvals list)\n", r.CallID, r.Output)
	})}
	if *id != "" {
		opts = append(opts, client.WithID(*id))
	}
	if *session != "" {
		opts = append(opts, client.WithSession(*session))
	}
	if *timeout > 0 {
		opts = append(opts, client.WithTimeout(*timeout))
	}
	var f *follower
	if *follow {
		f = newFollower(env.Stdout, env.Stderr) // follow.go
		opts = append(opts, client.OnProgress(f.progress))
	}
	wctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	traced, endTrace := traceCall(ctx, env, tool)
	res, err := c.Call(wctx, tool, arguments, append(opts, traced)...)
	endTrace(res, err)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return env.fail(ExitNoReach, "no result within --wait %s (is a worker running? the call may still run: toolctl events)", *wait)
		}
		return env.fail(ExitNoReach, "%v", err)
	}
	// A denied call ran nothing: its only output is the gate's reason,
	// said once, on stderr.
	denied := res.Status == events.StatusDenied && res.Decision != nil && res.Decision.Reason != ""
	if f != nil {
		f.newline()
	}
	if *full {
		b, _ := json.MarshalIndent(res, "", "  ")
		fmt.Fprintln(env.Stdout, string(b))
	} else if f != nil && f.complete(res) {
		// The stream carried the whole output: it is on the screen.
	} else if !denied {
		if f != nil && f.lastSeq > 0 {
			fmt.Fprintln(env.Stderr, "toolctl: the stream did not carry the whole output; the result's output:")
		}
		fmt.Fprint(env.Stdout, res.Output)
		if res.Output != "" && !strings.HasSuffix(res.Output, "\n") {
			fmt.Fprintln(env.Stdout)
		}
	}
	if res.Status != events.StatusOK || res.IsError {
		msg := fmt.Sprintf("toolctl: %s: status %s", tool, res.Status)
		if denied {
			msg += ": " + res.Decision.Reason
			if res.Decision.Rule != "" {
				msg += " (rule " + res.Decision.Rule + ")"
			}
		}
		fmt.Fprintln(env.Stderr, msg)
		if code := StatusExit(res.Status); code != ExitOK {
			return code
		}
		return ExitFailed // status ok, but the tool says it failed
	}
	return ExitOK
}

// summary is the first sentence of a tool's description, for a listing
// (`toolctl tools --json` has the whole text).
func summary(desc string) string {
	desc, _, _ = strings.Cut(desc, "\n")
	if i := strings.Index(desc, ". "); i > 0 {
		desc = desc[:i+1]
	}
	if r := []rune(desc); len(r) > 100 {
		desc = string(r[:99]) + "…"
	}
	return desc
}

// propertyTypes returns the JSON Schema type of each top-level property of
// tool, from a registry listing.
func propertyTypes(list []events.ToolData, tool string) map[string]string {
	for _, t := range list {
		if t.Name != tool && !contains(t.Aliases, tool) {
			continue
		}
		var s struct {
			Properties map[string]struct {
				Type any `json:"type"`
			} `json:"properties"`
		}
		_ = json.Unmarshal(t.Parameters, &s)
		out := map[string]string{}
		for k, p := range s.Properties {
			if ts, ok := p.Type.(string); ok {
				out[k] = ts
			}
		}
		return out
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// ParseArgs turns key=value and key:=json words into an arguments object.
// A key=value value is a string unless the tool's schema (types) says the
// property is a number, integer or boolean; key:=json is always raw JSON.
func ParseArgs(words []string, types map[string]string) (map[string]any, error) {
	out := map[string]any{}
	for _, w := range words {
		if k, v, ok := strings.Cut(w, ":="); ok && k != "" && !strings.Contains(k, "=") {
			var x any
			if err := json.Unmarshal([]byte(v), &x); err != nil {
				return nil, fmt.Errorf("argument %s: %q is not JSON: %v", k, v, err)
			}
			out[k] = x
			continue
		}
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("argument %q: want key=value or key:=json", w)
		}
		switch types[k] {
		case "integer", "number":
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, fmt.Errorf("argument %s: %q is not a number", k, v)
			}
			out[k] = json.Number(strconv.FormatFloat(n, 'f', -1, 64))
		case "boolean":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, fmt.Errorf("argument %s: %q is not true or false", k, v)
			}
			out[k] = b
		case "object", "array":
			var x any
			if err := json.Unmarshal([]byte(v), &x); err != nil {
				return nil, fmt.Errorf("argument %s: %q is not JSON: %v", k, v, err)
			}
			out[k] = x
		default:
			out[k] = v
		}
	}
	return out, nil
}

func cmdTools(ctx context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("tools", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	asJSON := fs.Bool("json", false, "print the listing as JSON (name, description, parameters)")
	format := fs.String("format", "", "print the tools the agent may call as a model API's tool definitions: openai, anthropic, gemini or mcp")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	nc, c, code := env.client()
	if c == nil {
		return code
	}
	defer nc.Close()
	if *format != "" {
		return printDefinitions(ctx, env, c, *format)
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := c.Tools(lctx)
	if err != nil {
		return env.fail(ExitNoReach, "%v", err)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	if *asJSON {
		b, _ := json.MarshalIndent(list, "", "  ")
		fmt.Fprintln(env.Stdout, string(b))
		return ExitOK
	}
	for _, t := range list {
		name := t.Name
		if len(t.Aliases) > 0 {
			name += " (" + strings.Join(t.Aliases, ", ") + ")"
		}
		fmt.Fprintf(env.Stdout, "%-32s %-8s %s\n", name, t.Kind, summary(t.Description))
	}
	return ExitOK
}

// exitCodesHelp is the exit code table, as help prints it.
const exitCodesHelp = `exit codes:
  0    ok
  1    the call failed (status error, timeout, interrupted), or the command could not do its work
  2    usage: a bad command line, or credentials that do not fit
  3    unreachable: no NATS server, worker or approver answered in time
  4    denied by the policy gate
  5    rejected by a person, expired without a decision, or cancelled
  130  interrupted (Ctrl-C): a call toolctl was waiting for is cancelled
`

// asksHelp reports whether a command's arguments ask for its help (-h,
// -help or --help before any "--").
func asksHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}
