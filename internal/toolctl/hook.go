package toolctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bearer"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/hookgate"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/policyload"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/trust"
)

// hookStdin is what a command hook reads; tests swap it.
var hookStdin io.Reader = os.Stdin

// cmdHook judges an agent's own tool calls by toolgate's policy:
//
//	toolctl hook claude|codex   a PreToolUse command hook (JSON on stdin, decision on stdout)
//	toolctl hook serve          the same as an HTTP endpoint for Claude Code's http hooks
func cmdHook(ctx context.Context, env *Env, args []string) int {
	if len(args) == 0 {
		return env.fail(ExitUsage, "hook: want claude, codex or serve")
	}
	mode, args := args[0], args[1:]
	if mode == "help" || mode == "-h" || mode == "-help" || mode == "--help" {
		mode, args = "claude|codex|serve", []string{"--help"} // the flags' usage, which every mode shares
	}
	fs := flag.NewFlagSet("hook "+mode, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	agent := fs.String("agent", env.Agent, "agent id the policy judges the calls as")
	policyFile := fs.String("policy", "", "policy file (default: the fleet's shared policy, else the built-in one)")
	noAsk := fs.Bool("no-ask", false, "answer an ask with \"ask\" (the agent asks its user) instead of asking people through the approver")
	askTimeout := fs.Duration("ask-timeout", 10*time.Minute, "how long people have to answer an ask")
	listen := fs.String("listen", "127.0.0.1:8472", "serve: where the HTTP endpoint listens (POST /hook)")
	tokens := fs.String("tokens", "", "serve: directory of bearer tokens; requests carry the --agent's (default <state dir>/tokens; mint with toolctl creds token AGENT)")
	insecure := fs.Bool("insecure-loopback", false, "serve: take requests WITHOUT a token, on a loopback address only (any local user may park calls as --agent)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	switch mode {
	case "claude", "codex", "serve":
	default:
		return env.fail(ExitUsage, "hook: unknown mode %q (want claude, codex or serve)", mode)
	}
	env.Agent = *agent
	var auth func(http.Handler) http.Handler
	if mode == "serve" {
		// Before anything connects: a face nobody may use does not start.
		var err error
		if auth, err = hookAuth(*tokens, *insecure, *agent, *listen); err != nil {
			return env.fail(ExitUsage, "%v", err)
		}
	}
	log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	j, closeFn, err := env.hookJudge(ctx, *policyFile, !*noAsk, log)
	if err != nil {
		if mode == "serve" {
			return env.fail(ExitNoReach, "%v", err)
		}
		// A command hook fails closed, and says why to the agent.
		printHook(env, hookDeny("toolgate could not judge the call: "+err.Error()))
		return ExitOK
	}
	defer closeFn()
	j.AskTimeout = *askTimeout
	if mode == "serve" {
		return serveHook(ctx, env, j, *listen, auth)
	}
	var in hookgate.Input
	if err := json.NewDecoder(io.LimitReader(hookStdin, 4<<20)).Decode(&in); err != nil {
		printHook(env, hookDeny("toolgate: the hook payload is not JSON: "+err.Error()))
		return ExitOK
	}
	out := j.Decide(ctx, in)
	if mode == "codex" {
		out = hookgate.Codex(out)
	}
	printHook(env, out)
	return ExitOK
}

func hookDeny(reason string) hookgate.Output {
	return hookgate.Output{HookSpecificOutput: &hookgate.Specific{HookEventName: "PreToolUse",
		PermissionDecision: string(policy.Deny), PermissionDecisionReason: reason}}
}

func printHook(env *Env, out hookgate.Output) {
	b, _ := json.Marshal(out)
	fmt.Fprintln(env.Stdout, string(b))
}

// hookJudge loads the policy (the file, else the fleet's shared one, else
// the built-in default) and, when asking people, connects to the bus as
// the agent: the question is a call the agent makes. The fleet's policy
// is read with an admin connection, since agents may not read the policy
// bucket.
func (e *Env) hookJudge(ctx context.Context, file string, ask bool, log *slog.Logger) (*hookgate.Judge, func(), error) {
	gate := policy.NewGate(nil)
	j := &hookgate.Judge{Gate: gate, Agent: e.Agent}
	var policyNC, agentNC *nats.Conn
	closeFn := func() {
		for _, nc := range []*nats.Conn{policyNC, agentNC} {
			if nc != nil {
				nc.Close()
			}
		}
	}
	loader := &policyload.Loader{Gate: gate, File: file, Logger: log}
	if file == "" {
		// Without the bus there is no fleet policy to judge by.
		var creds *identity.Creds
		var err error
		if policyNC, creds, err = e.connectCreds(identity.RoleAdmin, "admin"); err != nil {
			return nil, nil, fmt.Errorf("the fleet's policy (or judge by --policy FILE): %w", err)
		}
		// A pushed policy counts as it does for workers: sealed by an
		// admin of the account that issued these credentials.
		var accounts []string
		if creds != nil {
			accounts = []string{creds.Services}
		}
		if loader.Verifier, err = trust.NewVerifier(accounts, nil); err != nil {
			closeFn()
			return nil, nil, fmt.Errorf("trusted accounts: %w", err)
		}
		js, err := jetstream.New(policyNC)
		if err == nil {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			loader.KV, err = js.KeyValue(lctx, bus.BucketPolicy)
			cancel()
		}
		if err != nil {
			closeFn()
			return nil, nil, fmt.Errorf("the fleet's policy: %w", err)
		}
	}
	if _, err := loader.Load(ctx); err != nil {
		closeFn()
		return nil, nil, err
	}
	if !ask {
		return j, closeFn, nil
	}
	agentNC, err := e.connectAgent()
	if err != nil {
		// The policy still judges; an ask cannot reach people and is
		// denied with the reason.
		j.Asker = unreachable{err}
		return j, closeFn, nil
	}
	j.Agent = e.Agent
	c, err := client.New(agentNC, e.Agent)
	if err != nil {
		closeFn()
		return nil, nil, fmt.Errorf("--agent: %w", err)
	}
	j.Asker = hookgate.BusAsker{Client: c, OnParked: func(id string) {
		fmt.Fprintf(e.Stderr, "toolctl hook: waiting for a person: toolctl approvals approve|reject %s\n", id)
	}}
	return j, closeFn, nil
}

// hookAuth is what hook serve asks of a request: a bearer token of agent
// from dir (default the state directory's), or, with insecure, nothing,
// on a loopback address only.
func hookAuth(dir string, insecure bool, agent, listen string) (func(http.Handler) http.Handler, error) {
	if insecure {
		host, _, err := net.SplitHostPort(listen)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("--insecure-loopback: --listen %s is not a loopback address; without a token only loopback is allowed", listen)
		}
		return func(h http.Handler) http.Handler { return h }, nil
	}
	dir, agents, err := bearer.Holders(dir)
	if err != nil {
		return nil, fmt.Errorf("--tokens: %w", err)
	}
	if !slices.Contains(agents, agent) {
		return nil, fmt.Errorf("hook serve: agent %s has no bearer token in %s: mint one with `toolctl creds token %s` (requests send Authorization: Bearer TOKEN), or give --insecure-loopback to take every local user's requests", agent, dir, agent)
	}
	return func(h http.Handler) http.Handler {
		return bearer.Require(dir, func(a string) bool { return a == agent }, h)
	}, nil
}

func serveHook(ctx context.Context, env *Env, j *hookgate.Judge, addr string, auth func(http.Handler) http.Handler) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return env.fail(ExitUsage, "--listen: %v", err)
	}
	loopback := false
	if ta, ok := ln.Addr().(*net.TCPAddr); ok {
		loopback = ta.IP.IsLoopback()
	}
	mux := http.NewServeMux()
	mux.Handle("/hook", auth(hookgate.Handler(j, loopback)))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(env.Stderr, "toolctl hook: PreToolUse endpoint on http://%s/hook\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return env.fail(ExitFailed, "%v", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return ExitOK
}

// unreachable is the Asker when the bus cannot be reached.
type unreachable struct{ err error }

func (u unreachable) Ask(context.Context, []policy.Request, string, time.Duration) (bool, string, error) {
	return false, "", u.err
}
