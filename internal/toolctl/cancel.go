package toolctl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/toolgate/toolgate/pkg/events"
)

// cmdCancel cancels a call of the agent wherever it is, says where it
// was, and waits for its final result.
func cmdCancel(ctx context.Context, env *Env, args []string) int {
	fs := env.flagSet("cancel", "usage: toolctl cancel CALL_ID [--agent A] [--wait D]\nan agent cancels only its own calls (--agent, or the agent its --creds name)")
	wait := fs.Duration("wait", 30*time.Second, "how long to wait for the call's final result (0: do not wait)")
	words, code, ok := parseWords(fs, args, 1, 1)
	if !ok {
		return code
	}
	id := words[0]
	if err := events.ValidToken(id); err != nil {
		return env.fail(ExitUsage, "call id: %v", err)
	}
	nc, c, code := env.client()
	if c == nil {
		return code
	}
	defer nc.Close()
	r, err := c.Cancel(ctx, id)
	if err != nil {
		return env.fail(ExitNoReach, "%v", err)
	}
	if r.State == events.CancelUnknown {
		return env.fail(ExitFailed, "%s", r.Message)
	}
	fmt.Fprintln(env.Stdout, r.Message)
	if r.State == events.CancelFinished || *wait <= 0 {
		return ExitOK
	}
	wctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	res, err := c.Wait(wctx, id)
	if err != nil {
		if r.State == events.CancelQueued && errors.Is(err, context.DeadlineExceeded) {
			fmt.Fprintf(env.Stdout, "no worker took call %s within --wait %s; it will be answered cancelled when one does\n", id, *wait)
			return ExitOK
		}
		return env.fail(ExitNoReach, "%v", err)
	}
	line := strings.SplitN(res.Output, "\n", 2)[0]
	fmt.Fprintf(env.Stdout, "call %s: %s", id, res.Status)
	if line != "" {
		fmt.Fprintf(env.Stdout, ": %s", line)
	}
	fmt.Fprintln(env.Stdout)
	return ExitOK
}
