package toolctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/budget"
	"github.com/toolgate/toolgate/internal/bus"
)

// cmdBudgets prints the budget counters: what each agent (or session)
// used in the current window against the limits.
func cmdBudgets(ctx context.Context, env *Env, args []string) int {
	fs := env.flagSet("budgets", "usage: toolctl budgets [--agent A] [--session S] [--json]")
	agent := fs.String("agent", "", "only this agent's counters")
	session := fs.String("session", "", "only this session's counters")
	asJSON := fs.Bool("json", false, "print the counters as a JSON array")
	_, code, ok := parseWords(fs, args, 0, 0)
	if !ok {
		return code
	}
	nc, js, code := env.jetStream()
	if js == nil {
		return code
	}
	defer nc.Close()
	kv, err := js.KeyValue(ctx, bus.BucketBudgets)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return env.fail(ExitNoReach, "no budgets bucket %s yet: start a worker first", bus.BucketBudgets)
	}
	if err != nil {
		return env.fail(ExitNoReach, "open %s: %v", bus.BucketBudgets, err)
	}
	us, err := budget.List(ctx, kv, budget.Filter{Agent: *agent, Session: *session})
	if err != nil {
		return env.fail(ExitNoReach, "%v", err)
	}
	if *asJSON {
		if us == nil {
			us = []budget.Usage{}
		}
		b, _ := json.MarshalIndent(us, "", "  ")
		fmt.Fprintln(env.Stdout, string(b))
		return ExitOK
	}
	if len(us) == 0 {
		fmt.Fprintln(env.Stdout, "no budget has been used (budgets are set in the policy's budgets section)")
		return ExitOK
	}
	FormatBudgets(env.Stdout, us, time.Now())
	return ExitOK
}

// FormatBudgets writes counters as a table: budget, whose, calls, time
// and running against their limits, and when each resets.
func FormatBudgets(w io.Writer, us []budget.Usage, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BUDGET\tAGENT\tSESSION\tTOOL\tCALLS\tTIME\tRUNNING\tRESETS")
	for _, u := range us {
		session := u.Session
		if u.Scope != "session" {
			session = "-"
		} else if session == "" {
			session = "(none)"
		}
		tool := u.Tool
		if tool == "" {
			tool = "*"
		}
		resets := "never"
		if u.Scope == "session" {
			resets = "never (session)"
		}
		if t := u.ResetsAt(); !t.IsZero() {
			resets = t.UTC().Format(time.RFC3339) + " (in " + t.Sub(now).Round(time.Second).String() + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", u.Budget, u.Agent, session, tool,
			of(fmt.Sprint(u.Calls), u.MaxCalls > 0, fmt.Sprint(u.MaxCalls)),
			of((time.Duration(u.TimeMS)*time.Millisecond).String(), u.MaxTimeMS > 0, (time.Duration(u.MaxTimeMS)*time.Millisecond).String()),
			of(fmt.Sprint(len(u.Running)), u.MaxConcurrent > 0, fmt.Sprint(u.MaxConcurrent)), resets)
	}
	_ = tw.Flush()
}

func of(used string, limited bool, max string) string {
	if !limited {
		return used
	}
	return used + "/" + max
}
