package worker

import (
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/pkg/events"
)

// CallKey is the calls-bucket key of a call: the agent and the call id when
// the id is a safe key token, else a hash of it.
func CallKey(agent, id string) string { return bus.AgentKey(agent, id) }

func tokenOr(s, def string) string {
	if events.ValidToken(s) != nil {
		return def
	}
	return s
}
