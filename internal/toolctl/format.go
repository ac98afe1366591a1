package toolctl

import (
	"context"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/toolformat"
)

// printDefinitions prints the agent's tools in the shape a model API
// expects (toolctl tools --format openai|anthropic|gemini|mcp): the JSON
// to put in a request's tools field. Tools the API would refuse are named
// on stderr.
func printDefinitions(ctx context.Context, env *Env, c *client.Client, format string) int {
	f, err := toolformat.ParseFormat(format)
	if err != nil {
		return env.fail(ExitUsage, "--format: %v", err)
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := c.ToolDefinitions(lctx, f)
	if err != nil {
		return env.fail(ExitNoReach, "%v", err)
	}
	b, err := d.JSON()
	if err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	fmt.Fprintln(env.Stdout, string(b))
	for _, s := range d.Skipped {
		fmt.Fprintf(env.Stderr, "toolctl: left out %s: %s\n", s.Tool, s.Reason)
	}
	return ExitOK
}
