package identity

import (
	"time"

	"github.com/nats-io/jwt/v2"
)

// Stream, consumer and bucket names the permissions name. They are
// internal/bus's; identity cannot import it (bus imports nothing of ours
// but events, and the client side must stay light), so a test checks
// they agree.
const (
	streamCalls     = "TOOLGATE_CALLS"
	streamResults   = "TOOLGATE_RESULTS"
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

// InboxPrefix is the inbox prefix (nats.go CustomInboxPrefix) an identity
// must use: _INBOX_<name> for an agent, _INBOX.<role>.<name> for the
// others. Nobody may subscribe to _INBOX.>, so nobody reads another's
// replies.
func InboxPrefix(role Role, name string) string {
	if role == RoleAgent {
		return "_INBOX_" + name
	}
	return "_INBOX." + string(role) + "." + name
}

// Permissions returns the publish and subscribe permissions written into
// the user JWT of identity name with role. They are the whole of what
// the identity may do on the bus: everything not allowed is refused by
// the server with a permissions violation.
func Permissions(role Role, name string) jwt.Permissions {
	inbox := InboxPrefix(role, name) + ".>"
	taskConsumer := "task_" + name // internal/bus.TaskConsumerName
	var p jwt.Permissions
	switch role {
	case RoleAgent:
		// Its own calls and their cancellation, the tool listing, and
		// direct gets of its own stored results; it hears only its own
		// results and progress.
		p.Pub.Allow = jwt.StringList{
			"toolgate.call." + name + ".>",
			"toolgate.cancel." + name + ".>",
			"toolgate.api.tools",
			"$JS.API.DIRECT.GET." + streamResults + ".toolgate.result." + name + ".>",
			// Tasks delegated to it: its own task consumer only (created
			// with its own filter, read, acked), and answers and
			// progress in its own subject space.
			"$JS.API.CONSUMER.CREATE." + streamTasks + "." + taskConsumer + ".toolgate.task." + name + ".>",
			"$JS.API.CONSUMER.INFO." + streamTasks + "." + taskConsumer,
			"$JS.API.CONSUMER.MSG.NEXT." + streamTasks + "." + taskConsumer,
			"$JS.ACK." + streamTasks + "." + taskConsumer + ".>",
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
		// Never calls, never decisions.
		p.Pub.Allow = jwt.StringList{
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
		}
		p.Sub.Allow = jwt.StringList{
			"toolgate.api.tools",
			"toolgate.cancel.>",
			"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + streamCalls + "." + consumerWorkers,
			// The answers and progress of the tasks it delegated.
			"toolgate.task_result.>",
			"toolgate.task_progress.>",
			inbox,
		}
		// Replies to the tool listing and cancellation requests it answers.
		p.Resp = &jwt.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
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
		// responses stay allowed by the response permission.
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
		// inboxes. It publishes nothing else and hears no other hook's
		// requests, no calls, no results.
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
