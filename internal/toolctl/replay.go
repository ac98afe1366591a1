package toolctl

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/toolgate/toolgate/internal/policyreplay"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
)

// policyReplay judges the audited calls of a window again under a policy
// file: the whole trail is verified first (as audit --verify does) and a
// trail that does not verify is reported, never replayed.
func policyReplay(ctx context.Context, env *Env, args []string) int {
	fs := env.flagSet("policy replay", "usage: toolctl policy replay FILE [--since DURATION] [--until TIME] [--agent GLOB] [--tool NAME] [--json] [--html FILE]")
	since := fs.Duration("since", 24*time.Hour, "replay the calls decided this long ago and later")
	until := fs.String("until", "", "replay the calls decided before this time (RFC 3339; default now)")
	agent := fs.String("agent", "", "only the calls of agents this glob matches")
	tool := fs.String("tool", "", "only the calls of this tool (its canonical name)")
	asJSON := fs.Bool("json", false, "print one JSON object per changed call, then a summary object")
	htmlFile := fs.String("html", "", "also write the result as a self-contained page to this file")
	words, code, ok := parseWords(fs, args, 1, 1)
	if !ok {
		return code
	}
	opts := policyreplay.Options{Since: time.Now().Add(-*since), Agent: *agent, Tool: *tool}
	if *until != "" {
		t, err := time.Parse(time.RFC3339, *until)
		if err != nil {
			return env.fail(ExitUsage, "--until: %v (want a time such as 2026-01-02T15:04:05Z)", err)
		}
		opts.Until = t
	}
	if *agent != "" {
		if _, err := filepath.Match(*agent, ""); err != nil {
			return env.fail(ExitUsage, "--agent: bad pattern %q: %v", *agent, err)
		}
	}
	if *tool != "" {
		opts.Tool = policy.CanonicalTool(*tool)
	}
	p, warns, err := policy.Load(words[0])
	if err != nil {
		return env.fail(ExitFailed, "%v", policy.Suggest(err))
	}
	for _, w := range warns {
		fmt.Fprintf(env.Stderr, "%s:line %d: warning: %s\n", words[0], w.Line, w.Message)
	}
	nc, js, code := env.jetStream()
	if js == nil {
		return code
	}
	defer nc.Close()
	r := policyreplay.New(p, opts)
	tr, code := env.readTrail(ctx, js, 3*events.AuditLivenessPeriod, func(a *events.AuditData) { r.Add(ctx, a) })
	if tr == nil {
		return code
	}
	if tr.problems() > 0 {
		tr.report(env.Stderr)
		return env.fail(ExitFailed, "the audit trail does not verify (%d problems): nothing replayed", tr.problems())
	}
	res := r.Result()
	if *asJSON {
		err = res.JSON(env.Stdout)
	} else {
		err = res.Text(env.Stdout)
	}
	if err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	if *htmlFile != "" {
		if err := writeHTML(*htmlFile, res); err != nil {
			return env.fail(ExitFailed, "--html: %v", err)
		}
		abs, _ := filepath.Abs(*htmlFile)
		fmt.Fprintf(env.Stderr, "replay page: file://%s\n", abs)
	}
	if res.Summary.Changed() > 0 {
		return ExitChanged
	}
	return ExitOK
}

func writeHTML(file string, res policyreplay.Result) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := res.HTML(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
