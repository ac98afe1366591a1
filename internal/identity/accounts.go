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
	// Into, when set, is the subject space the agents' messages arrive on
	// in the toolgate account instead of Subject (a service crossing
	// renamed on the way, the same tokens after the prefix).
	Into string
}

// Exported is the crossing's subject space in the toolgate account.
func (c Crossing) Exported() string {
	if c.Into != "" {
		return c.Into
	}
	return c.Subject
}

// IntakePrefix starts the subjects the agents' messages bound for a
// stream arrive on in the toolgate account: toolgate.intake.<the stream's
// subject>, e.g. toolgate.intake.toolgate.call.<agent>.<tool>. A worker
// forwards each into its stream on the subject after the prefix, its
// Nats-Msg-Id scoped by the agent the subject names (<agent>.<id>), so one
// agent's message ids can never make another's message a duplicate.
const IntakePrefix = "toolgate.intake."

// Crossings are every subject space joining the toolgate and agents
// accounts: the toolgate account exports each, the agents account
// imports each, and nothing else crosses. Inside the agents account the
// user permissions still hold each agent to its own <agent> token.
var Crossings = []Crossing{
	{Subject: "toolgate.call.>", Service: true, Why: "calls, forwarded by a worker into the calls stream with the dedup id scoped by the agent (the answer is the stream's acknowledgement)", Into: IntakePrefix + "toolgate.call.>"},
	{Subject: "toolgate.cancel.>", Service: true, Why: "cancellations of calls, answered by a worker"},
	{Subject: "toolgate.api.tools", Service: true, Why: "the tool listing, answered by a worker"},
	{Subject: "toolgate.api.tools.*", Service: true, Why: "an agent's own tool listing, answered by a worker"},
	{Subject: events.ResultAPIPrefix + ">", Service: true, Why: "an agent's own stored results, answered by a worker"},
	{Subject: events.TaskAPIPrefix + ">", Service: true, Why: "the tasks delegated to an agent, handed over by a worker"},
	{Subject: "toolgate.task_result.>", Service: true, Why: "answers to delegated tasks, forwarded by a worker into the task results stream with the dedup id scoped by the agent", Into: IntakePrefix + "toolgate.task_result.>"},
	{Subject: "toolgate.task_progress.>", Service: true, Why: "progress of delegated tasks, heard by the delegating worker"},
	{Subject: "toolgate.result.>", Service: false, Why: "results"},
	{Subject: "toolgate.progress.>", Service: false, Why: "progress of calls"},
	{Subject: "toolgate.event.tool.>", Service: false, Why: "tools coming and going"},
	{Subject: "toolgate.event.policy_change", Service: false, Why: "policy changes"},
	{Subject: "toolgate.task_cancel.>", Service: false, Why: "cancellations of delegated tasks"},
}

// exports are the toolgate account's exports: the Crossings.
func exports() jwt.Exports {
	var out jwt.Exports
	for _, c := range Crossings {
		e := &jwt.Export{Name: c.Why, Subject: jwt.Subject(c.Exported()), Type: jwt.Stream}
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
		i := &jwt.Import{Name: c.Why, Subject: jwt.Subject(c.Exported()), Account: account, Type: jwt.Stream}
		if c.Into != "" {
			i.LocalSubject = jwt.RenamingSubject(c.Subject)
		}
		if c.Service {
			i.Type = jwt.Service
		}
		out.Add(i)
	}
	return out
}
