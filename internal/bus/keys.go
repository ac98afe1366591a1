package bus

import "github.com/toolgate/toolgate/pkg/events"

// AgentKey is the key-value key of the entry id owned by agent (a call in
// the calls bucket, a task in the tasks bucket): events.AgentKey, agent
// and id when id is a safe key token, else agent and a hash of id, so an
// id the agent chose can never add key tokens or wildcards.
func AgentKey(agent, id string) string { return events.AgentKey(agent, id) }
