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

	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailed  = 1 // the call did not succeed (error, denied, timeout, ...)
	ExitUsage   = 2 // bad command line
	ExitNoReach = 3 // could not reach NATS or a worker
)

// Env is what a command runs with.
type Env struct {
	Stdout, Stderr io.Writer
	NATSURL        string
	Agent          string
}

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *Env, args []string) int
}

// Extra lets other packages add commands (policy, approvals) without this
// package importing them.
type Extra struct {
	Name    string
	Summary string
	// Run gets the arguments after the command name and the global flags.
	Run func(ctx context.Context, env *Env, args []string) int
}

// Run runs toolctl with args (without the program name).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, extra ...Extra) int {
	env := &Env{Stdout: stdout, Stderr: stderr}
	cmds := []command{
		{"call", "call TOOL key=value ... | --json '{...}': run a tool and print its output", cmdCall},
		{"tools", "list the tools the workers offer", cmdTools},
		{"events", "print results, domain and audit events (--follow to keep going)", cmdEvents},
		{"policy", "check | lint | default | push FILE | amendments: the policy gate", cmdPolicy},
		{"approvals", "list | show | approve | reject | answer: calls waiting for people", cmdApprovals},
		{"mcp", "serve the tools as an MCP server on stdio (an agent's mcpServers entry runs this)", cmdMCP},
		{"hook", "claude | codex | serve: judge an agent's own tool calls by the policy (PreToolUse hooks)", cmdHook},
	}
	for _, e := range extra {
		cmds = append(cmds, command{e.Name, e.Summary, e.Run})
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
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: toolctl [--nats URL] [--agent ID] COMMAND [ARGS]")
		fmt.Fprintln(stderr, "commands:")
		for _, c := range cmds {
			fmt.Fprintf(stderr, "  %-10s %s\n", c.name, c.summary)
		}
		fmt.Fprintln(stderr, "flags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return ExitUsage
	}
	name := fs.Arg(0)
	for _, c := range cmds {
		if c.name == name {
			return c.run(ctx, env, fs.Args()[1:])
		}
	}
	fmt.Fprintf(stderr, "toolctl: unknown command %q\n", name)
	fs.Usage()
	return ExitUsage
}

// Connect opens a NATS connection for a command, with a clear error.
func (e *Env) Connect() (*nats.Conn, error) {
	nc, err := nats.Connect(e.NATSURL, nats.Name("toolctl"), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("cannot reach NATS at %s (is a worker running? start one with `go run ./cmd/worker`): %w", e.NATSURL, err)
	}
	return nc, nil
}

// client connects and returns an agent client, or a nil client and the
// exit code after saying what went wrong.
func (e *Env) client() (*nats.Conn, *client.Client, int) {
	nc, err := e.Connect()
	if err != nil {
		return nil, nil, e.fail(ExitNoReach, "%v", err)
	}
	c, err := client.New(nc, e.Agent)
	if err != nil {
		nc.Close()
		return nil, nil, e.fail(ExitUsage, "--agent: %v", err)
	}
	return nc, c, ExitOK
}

// jetStream connects and returns the JetStream API, or nil and the exit
// code after saying what went wrong.
func (e *Env) jetStream() (*nats.Conn, jetstream.JetStream, int) {
	nc, err := e.Connect()
	if err != nil {
		return nil, nil, e.fail(ExitNoReach, "%v", err)
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
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	raw := fs.String("json", "", "arguments as one JSON object")
	id := fs.String("id", "", "call id (default: a new unique id)")
	session := fs.String("session", "", "session id")
	timeout := fs.Duration("timeout", 0, "tool timeout (default: the tool's)")
	wait := fs.Duration("wait", 15*time.Minute, "how long to wait for the result")
	full := fs.Bool("result", false, "print the whole result as JSON")
	fs.Usage = func() {
		fmt.Fprintln(env.Stderr, "usage: toolctl call [flags] TOOL [key=value | key:=json ...]")
		fs.PrintDefaults()
	}
	// Allow flags after the tool name too.
	tool, rest := "", []string{}
	for i := 0; i < len(args); i++ {
		if tool == "" && !strings.HasPrefix(args[i], "-") {
			tool = args[i]
			rest = append(rest, args[i+1:]...)
			break
		}
		rest = append(rest, args[i])
	}
	var kv []string
	var flags []string
	for _, a := range rest {
		if strings.HasPrefix(a, "-") {
			flags = append(flags, a)
		} else if len(flags) > 0 && needsValue(flags[len(flags)-1]) {
			flags = append(flags, a)
		} else {
			kv = append(kv, a)
		}
	}
	if err := fs.Parse(flags); err != nil {
		return ExitUsage
	}
	if tool == "" {
		fs.Usage()
		return ExitUsage
	}
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
	wctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	res, err := c.Call(wctx, tool, arguments, opts...)
	if err != nil {
		return env.fail(ExitNoReach, "%v", err)
	}
	if *full {
		b, _ := json.MarshalIndent(res, "", "  ")
		fmt.Fprintln(env.Stdout, string(b))
	} else {
		fmt.Fprint(env.Stdout, res.Output)
		if res.Output != "" && !strings.HasSuffix(res.Output, "\n") {
			fmt.Fprintln(env.Stdout)
		}
	}
	if res.Status != events.StatusOK || res.IsError {
		msg := fmt.Sprintf("toolctl: %s: status %s", tool, res.Status)
		if res.Decision != nil && res.Decision.Reason != "" && res.Status == events.StatusDenied {
			msg += " (" + res.Decision.Reason + ")"
		}
		fmt.Fprintln(env.Stderr, msg)
		return ExitFailed
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

func needsValue(flagArg string) bool {
	if strings.Contains(flagArg, "=") {
		return false
	}
	switch strings.TrimLeft(flagArg, "-") {
	case "json", "id", "session", "timeout", "wait":
		return true
	}
	return false
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
