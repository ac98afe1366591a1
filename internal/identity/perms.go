package identity

import (
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/trust"
)

// Stream, consumer and bucket names the permissions name. They are
// internal/bus's; identity cannot import it (bus imports nothing of ours
// but events, and the client side must stay light), so a test checks
// they agree.
const (
	streamCalls     = "TOOLGATE_CALLS"
	streamApprovals = "TOOLGATE_APPROVALS"
	consumerWorkers = "workers"
	consumerApprove = "approver"
	streamTasks     = "TOOLGATE_TASKS"
	bucketTasks     = "toolgate_tasks"
	bucketCache     = "toolgate_cache"
	bucketCalls     = "toolgate_calls"
	bucketPolicy    = "toolgate_policy"
	bucketApprovals = "toolgate_approvals"
	bucketBudgets   = "toolgate_budgets"
	bucketCancels   = "toolgate_cancels"
)

// InboxPrefix is the inbox prefix an identity must use (trust.InboxPrefix).
func InboxPrefix(role Role, name string) string { return trust.InboxPrefix(role, name) }

// ServiceReplyPrefix starts the reply subject a request gets when it
// crosses from the agents account into the toolgate account: the server
// answers it by delivering the answer to the requester's own reply
// subject, in the agents account.
const ServiceReplyPrefix = "_R_."

// Permissions returns the publish and subscribe permissions written into
// the user JWT of identity name with role. They are the whole of what
// the identity may do on the bus: everything not allowed is refused by
// the server with a permissions violation.
func Permissions(role Role, name string) jwt.Permissions {
	inbox := InboxPrefix(role, name) + ".>"
	var p jwt.Permissions
	switch role {
	case RoleAgent:
		// In the agents account, without JetStream: its own calls and
		// their cancellation, the tool listing, its own stored results
		// and delegated tasks (services workers answer), and answers and
		// progress of its tasks, all in its own subject space. It hears
		// only its own results and progress. Everything here crosses into
		// the toolgate account by an export (Crossings), nothing else.
		p.Pub.Allow = jwt.StringList{
			"toolgate.call." + name + ".>",
			"toolgate.cancel." + name + ".>",
			"toolgate.api.tools",
			"toolgate.api.tools." + name,
			events.ResultAPIPrefix + name + ".>",
			events.TaskAPIPrefix + name + ".>",
			"toolgate.task_result." + name + ".>",
			"toolgate.task_progress." + name + ".>",
		}
		p.Sub.Allow = jwt.StringList{
			"toolgate.result." + name + ".>",
			"toolgate.progress." + name + ".>",
			// Tools coming and going, and policy changes: what an MCP
			// face serving this agent tells its client (list_changed).
			"toolgate.event.tool.>",
			"toolgate.event.policy_change",
			// Cancellations of the tasks delegated to it.
			"toolgate.task_cancel." + name + ".*",
			inbox,
		}
	case RoleWorker:
		// Results and everything a worker reports, the JetStream API
		// (workers provision the bus), its consumers' acks, and the
		// buckets it keeps call records, parked calls and amendments in.
		// Never decisions; calls and task answers only as the intake
		// forwarding the agents' (IntakePrefix).
		p.Pub.Allow = jwt.StringList{
			"toolgate.call.>",
			// Calls waiting out their agent's bounds (message
			// schedules of the calls stream, fired into toolgate.call.>).
			"toolgate.call_wait.>",
			"toolgate.task_result.>",
			"toolgate.result.>",
			"toolgate.progress.>",
			"toolgate.event.>",
			"toolgate.audit.>",
			"toolgate.dlq.>",
			"toolgate.approval.request.>",
			"toolgate.approval.refused.>",
			"toolgate.approval.resolved.>",
			"$JS.API.>",
			"$JS.ACK." + streamCalls + "." + consumerWorkers + ".>",
			"$JS.ACK." + streamApprovals + ".>",
			// The tasks it hands to the agents they are delegated to.
			"$JS.ACK." + streamTasks + ".>",
			"$JS.FC.>",
			"$KV." + bucketCalls + ".>",
			"$KV." + bucketApprovals + ".>",
			"$KV." + bucketPolicy + ".amendments.>",
			"$KV." + bucketBudgets + ".>",
			"$KV." + bucketCancels + ".>",
			// Delegation: tasks and their cancellations, the task records;
			// the result cache.
			"toolgate.task.>",
			"toolgate.task_cancel.>",
			"$KV." + bucketTasks + ".>",
			"$KV." + bucketCache + ".>",
			// Remote tools: discovery (NATS micro) and their endpoints.
			"$SRV.>",
			"toolgate.remote.>",
			// Tool hooks: requests to the hook services.
			"toolgate.hook.>",
			// Answers to the requests it serves (tool listing,
			// cancellation, stored results, tasks): on the reply an
			// agent's request gets crossing accounts (_R_.…, which the
			// server maps back into the agent's own inbox), or in an
			// admin's or worker's inbox. Nowhere else: no allow_responses.
			ServiceReplyPrefix + ">",
			InboxPrefix(RoleAdmin, "") + ">",
			InboxPrefix(RoleWorker, "") + ">",
		}
		p.Sub.Allow = jwt.StringList{
			"toolgate.api.tools",
			"toolgate.api.tools.*",
			"toolgate.cancel.>",
			// The agents' calls and task answers, forwarded into their
			// streams.
			IntakePrefix + ">",
			// The agents' stored results and tasks (they have no
			// JetStream API).
			events.ResultAPIPrefix + ">",
			events.TaskAPIPrefix + ">",
			"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + streamCalls + "." + consumerWorkers,
			// The answers and progress of the tasks it delegated.
			"toolgate.task_result.>",
			"toolgate.task_progress.>",
			inbox,
		}
	case RoleApprover:
		// Decisions, and reading what a person must see to decide: the
		// parked calls (bucket) and the requests (stream, through its
		// durable consumer). No bucket writes, no results, no policy.
		kv := "KV_" + bucketApprovals
		p.Pub.Allow = jwt.StringList{
			"toolgate.approval.decision.>",
			"$JS.API.STREAM.INFO." + kv,
			"$JS.API.STREAM.INFO." + streamApprovals,
			"$JS.API.DIRECT.GET." + kv + ".>",
			"$JS.API.CONSUMER.CREATE." + kv + ".>",
			"$JS.API.CONSUMER.DELETE." + kv + ".>",
			"$JS.API.CONSUMER.INFO." + kv + ".>",
			"$JS.FC." + kv + ".>",
			"$JS.API.CONSUMER.CREATE." + streamApprovals + "." + consumerApprove,
			"$JS.API.CONSUMER.CREATE." + streamApprovals + "." + consumerApprove + ".>",
			"$JS.API.CONSUMER.DURABLE.CREATE." + streamApprovals + "." + consumerApprove,
			"$JS.API.CONSUMER.INFO." + streamApprovals + "." + consumerApprove,
			"$JS.API.CONSUMER.MSG.NEXT." + streamApprovals + "." + consumerApprove,
			"$JS.ACK." + streamApprovals + "." + consumerApprove + ".>",
		}
		p.Sub.Allow = jwt.StringList{
			"toolgate.approval.>",
			inbox,
		}
	case RoleTool:
		// A remote tool service named after its tool: it answers the
		// micro discovery requests and the calls workers route to
		// toolgate.remote.<name>, replying on the requester's inbox. It
		// publishes nothing else and hears no other tool's calls.
		// An empty allow list would allow everything: deny all, the
		// responses stay allowed by the response permission: only the
		// replies of requests it got, which only workers send (and name).
		// An inbox allow list instead would let it forge what a worker's
		// inbox expects (stream acknowledgements).
		p.Pub.Deny = jwt.StringList{">"}
		p.Sub.Allow = jwt.StringList{
			"$SRV.>",
			"toolgate.remote." + name,
			inbox,
		}
		p.Resp = &jwt.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
	case RoleHook:
		// A tool hook service named after its hook: it hears the requests
		// workers send to toolgate.hook.<name> and replies on their
		// inboxes (the response permission, as for RoleTool). It
		// publishes nothing else and hears no other hook's requests, no
		// calls, no results.
		p.Pub.Deny = jwt.StringList{">"}
		p.Sub.Allow = jwt.StringList{
			"toolgate.hook." + name,
			inbox,
		}
		p.Resp = &jwt.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
	case RoleAdmin:
		// A person at toolctl: the JetStream API (follow events, read
		// parked calls), policy and amendments, decisions, the tool
		// listing. Never calls, results or progress.
		p.Pub.Allow = jwt.StringList{
			"toolgate.approval.decision.>",
			"toolgate.api.tools",
			"toolgate.api.tools.*",
			"$JS.API.>",
			"$JS.ACK.>",
			"$JS.FC.>",
			"$KV." + bucketPolicy + ".>",
		}
		p.Sub.Allow = jwt.StringList{
			"toolgate.>",
			"$JS.EVENT.>",
			inbox,
		}
	}
	return p
}
