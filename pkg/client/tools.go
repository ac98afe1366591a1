package client

import (
	"context"
	"encoding/json"
	"regexp"
	"sync"

	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/toolformat"
)

// AgentTools asks a worker for the tools this client's agent may call:
// the registry listing without the tools its policy denies outright.
func (c *Client) AgentTools(ctx context.Context) ([]events.ToolData, error) {
	body, _ := json.Marshal(events.ToolsListRequest{Agent: c.agent})
	return c.listTools(ctx, events.ToolsListSubject(c.agent), body)
}

// ToolDefinitions returns the agent's tools as the API named by format
// expects them in its request (OpenAI, Anthropic, Gemini, MCP): ready to
// put in a model request's tools field.
func (c *Client) ToolDefinitions(ctx context.Context, format toolformat.Format) (*toolformat.Definitions, error) {
	list, err := c.AgentTools(ctx)
	if err != nil {
		return nil, err
	}
	return toolformat.Convert(list, format)
}

// traceParentRE is a W3C traceparent header value (version 00).
// Compiled on first use: its counted repetitions make a large program.
var traceParentRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)
})
