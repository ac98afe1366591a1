package identity

import (
	"github.com/nats-io/jwt/v2"

	"github.com/toolgate/toolgate/pkg/events"
)

// AgentsAccountName is the account agents live in, apart from toolgate's
// services. It has no JetStream: what an agent sends and receives crosses
// into the toolgate account only through the exports below.
const AgentsAccountName = "agents"

// Crossing is one subject space joining the two accounts.
type Crossing struct {
	// Subject is the subject space, the same on both sides.
	Subject string
	// Service: the agents send requests (or plain messages) into the
	// toolgate account, and an answer comes back to the requester's
	// reply subject in the agents account. Otherwise a stream: messages
	// published in the toolgate account reach the agents account.
	Service bool
	// Why says what crosses, for the account JWTs and the docs.
	Why string
}

// Crossings are every subject space joining the toolgate and agents
// accounts: the toolgate account exports each, the agents account
// imports each, and nothing else crosses. Inside the agents account the
// user permissions still hold each agent to its own <agent> token.
var Crossings = []Crossing{
	{"toolgate.call.>", true, "calls, stored by the calls stream (the answer is its acknowledgement)"},
	{"toolgate.cancel.>", true, "cancellations of calls, answered by a worker"},
	{"toolgate.api.tools", true, "the tool listing, answered by a worker"},
	{"toolgate.api.tools.*", true, "an agent's own tool listing, answered by a worker"},
	{events.ResultAPIPrefix + ">", true, "an agent's own stored results, answered by a worker"},
	{events.TaskAPIPrefix + ">", true, "the tasks delegated to an agent, handed over by a worker"},
	{"toolgate.task_result.>", true, "answers to delegated tasks, stored by the task results stream"},
	{"toolgate.task_progress.>", true, "progress of delegated tasks, heard by the delegating worker"},
	{"toolgate.result.>", false, "results"},
	{"toolgate.progress.>", false, "progress of calls"},
	{"toolgate.event.tool.>", false, "tools coming and going"},
	{"toolgate.event.policy_change", false, "policy changes"},
	{"toolgate.task_cancel.>", false, "cancellations of delegated tasks"},
}

// exports are the toolgate account's exports: the Crossings.
func exports() jwt.Exports {
	var out jwt.Exports
	for _, c := range Crossings {
		e := &jwt.Export{Name: c.Why, Subject: jwt.Subject(c.Subject), Type: jwt.Stream}
		if c.Service {
			e.Type = jwt.Service
			e.ResponseType = jwt.ResponseTypeSingleton
		}
		out.Add(e)
	}
	return out
}

// imports are the agents account's imports from the toolgate account
// whose public key is account: the Crossings.
func imports(account string) jwt.Imports {
	var out jwt.Imports
	for _, c := range Crossings {
		i := &jwt.Import{Name: c.Why, Subject: jwt.Subject(c.Subject), Account: account, Type: jwt.Stream}
		if c.Service {
			i.Type = jwt.Service
		}
		out.Add(i)
	}
	return out
}
