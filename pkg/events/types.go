// Package events is toolgate's wire contract: CloudEvents types, subjects,
// payloads and the codec between CloudEvents and NATS messages.
//
// Every agent, in any language, codes against what this package describes;
// docs/EVENTS.md is its prose twin.
package events

import (
	"encoding/json"
	"time"
)

// CloudEvents types published and consumed by toolgate. Types are reverse-DNS
// and versioned; a breaking change to a payload gets a new version suffix.
const (
	TypeCallRequested     = "dev.toolgate.call.requested.v1"
	TypeCallCompleted     = "dev.toolgate.call.completed.v1"
	TypeCallProgress      = "dev.toolgate.call.progress.v1"
	TypeCallAudited       = "dev.toolgate.call.audited.v1"
	TypeDecisionAudited   = "dev.toolgate.decision.audited.v1"
	TypeAuditCheckpoint   = "dev.toolgate.audit.checkpoint.v1"
	TypeToolRegistered    = "dev.toolgate.tool.registered.v1"
	TypeToolUnregistered  = "dev.toolgate.tool.unregistered.v1"
	TypeToolRefused       = "dev.toolgate.tool.refused.v1"
	TypePolicyViolation   = "dev.toolgate.policy.violation.v1"
	TypePolicyRejected    = "dev.toolgate.policy.rejected.v1"
	TypePolicyApplied     = "dev.toolgate.policy.applied.v1"
	TypeApprovalRequested = "dev.toolgate.approval.requested.v1"
	TypeApprovalDecided   = "dev.toolgate.approval.decided.v1"
)

// Status is the outcome of a call as reported in its result.
type Status string

// The statuses a result can carry.
const (
	StatusOK          Status = "ok"          // the tool ran and succeeded
	StatusError       Status = "error"       // bad input, unknown tool, or the tool failed
	StatusDenied      Status = "denied"      // the policy gate refused the call
	StatusPending     Status = "pending"     // parked, waiting for a person's decision
	StatusRejected    Status = "rejected"    // a person rejected the call
	StatusExpired     Status = "expired"     // no decision arrived before the deadline
	StatusTimeout     Status = "timeout"     // the tool ran past its timeout and was killed
	StatusInterrupted Status = "interrupted" // the worker stopped while the tool ran
	StatusCancelled   Status = "cancelled"   // the caller cancelled the call
)

// Final reports whether no further result will follow for the call.
func (s Status) Final() bool { return s != StatusPending }

// CallData is the data of a dev.toolgate.call.requested.v1 event.
type CallData struct {
	// Arguments are the tool's arguments, validated against its JSON Schema.
	Arguments json.RawMessage `json:"arguments"`
	// SessionID groups calls of one agent conversation (optional).
	SessionID string `json:"session_id,omitempty"`
	// TimeoutMS asks for a shorter timeout than the tool's default (optional).
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// JudgeOnly asks for a verdict, never an execution: the call is
	// validated, judged and, on ask, approved by people as usual, then
	// answered ok without running the tool (the caller runs it itself,
	// as an agent's own tool judged through its hook).
	JudgeOnly bool `json:"judge_only,omitempty"`
	// ParentCallID names the delegated task this call serves: its task
	// id (TaskRequestData.TaskID, fresh and random, never the parent's
	// call id). Set by an agent serving
	// a task (pkg/client does it); the worker checks it against the task
	// record it stored and holds the call to that task's allowed tools.
	ParentCallID string `json:"parent_call_id,omitempty"`
}

// Decision is the policy decision recorded in results, audit and violation
// events.
type Decision struct {
	Action    string `json:"action"`
	Reason    string `json:"reason,omitempty"`
	Rule      string `json:"rule,omitempty"`
	Offending string `json:"offending,omitempty"`
	Revision  string `json:"revision,omitempty"`
	// Approvers lists who approved the call, when it was approved by people.
	Approvers []string `json:"approvers,omitempty"`
}

// ResultData is the data of a dev.toolgate.call.completed.v1 event.
type ResultData struct {
	CallID     string         `json:"call_id"`
	Agent      string         `json:"agent"`
	Tool       string         `json:"tool"`
	SessionID  string         `json:"session_id,omitempty"`
	Status     Status         `json:"status"`
	Output     string         `json:"output"`
	IsError    bool           `json:"is_error"`
	Metadata   map[string]any `json:"metadata,omitempty"`
	Decision   *Decision      `json:"decision,omitempty"`
	DurationMS int64          `json:"duration_ms"`
	// Error is a machine-readable code for failures that did not come from
	// the tool itself: "invalid_event", "invalid_arguments", "unknown_tool",
	// "payload_too_large", "source_mismatch", "internal".
	Error string `json:"error,omitempty"`
	// ParentCallID is the task call this call served, for a sub-agent's
	// call, as the task's record confirmed it (a claim the record does not
	// back is not repeated here; see CallData.ParentCallID).
	ParentCallID string `json:"parent_call_id,omitempty"`
	// Cached marks a result served from the result cache: the tool did
	// not run again (see docs/EVENTS.md, result caching).
	Cached bool `json:"cached,omitempty"`
	// Hooks lists what tool hooks changed in the call, in order: its
	// arguments (before) or its output (after).
	Hooks []HookChange `json:"hooks,omitempty"`
}

// ProgressData is the data of a dev.toolgate.call.progress.v1 event: a chunk
// of output streamed while a tool runs. Progress is best effort (core NATS,
// not persisted); the result is authoritative.
type ProgressData struct {
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	Stream string `json:"stream"` // "stdout", "stderr", "status" (tools.Stream*) or "task" (a delegated task's progress)
	Seq    int64  `json:"seq"`
	Chunk  string `json:"chunk"`
}

// Audit kinds: what an audit event records.
const (
	AuditExecution = "execution" // a call reached its final status (dev.toolgate.call.audited.v1)
	AuditDecision  = "decision"  // the gate or people decided (dev.toolgate.decision.audited.v1)
)

// AuditData is the data of a dev.toolgate.call.audited.v1 event, one per
// call that reached a final status (carrying the policy gate's decision
// on the run that ended it, when that decision stood), and of a
// dev.toolgate.decision.audited.v1 event, one per other decision: people's
// on a parked call, the gate's on a call that parked or whose run changed
// the gate's decision.
type AuditData struct {
	// Kind is execution or decision.
	Kind        string    `json:"kind,omitempty"`
	CallID      string    `json:"call_id"`
	Agent       string    `json:"agent"`
	Tool        string    `json:"tool"`
	SessionID   string    `json:"session_id,omitempty"`
	Status      Status    `json:"status"`
	IsError     bool      `json:"is_error"`
	Decision    *Decision `json:"decision,omitempty"`
	DurationMS  int64     `json:"duration_ms"`
	ArgsSHA256  string    `json:"args_sha256"`
	OutputBytes int       `json:"output_bytes"`
	Worker      string    `json:"worker"`
	Error       string    `json:"error,omitempty"`
	Time        time.Time `json:"time"`
	// Approval says who decided a parked call, when and why.
	Approval *ApprovalAudit `json:"approval,omitempty"`
	// DecidedBy is "policy" for the gate's decision, else the people who
	// decided (decision events). On an execution event, ["policy"] says
	// that it carries the gate's decision on the run (Decision, DecidedAt)
	// in place of a decision event of its own.
	DecidedBy []string `json:"decided_by,omitempty"`
	// DecidedAt is when the gate's judgement of the run began, on an
	// execution event that carries it (the time its decision event would
	// have had).
	DecidedAt time.Time `json:"decided_at,omitzero"`
	// ResultSHA256 is the SHA-256 of the result's output as published
	// (execution events only).
	ResultSHA256 string `json:"result_sha256,omitempty"`
	// Resumed marks what happened after people decided a parked call.
	Resumed bool `json:"resumed,omitempty"`
	// JudgeOnly marks a call that was judged and not executed.
	JudgeOnly bool `json:"judge_only,omitempty"`
	// ParentCallID is the task call a sub-agent's call served: in
	// execution events the parent's call id as the task's record
	// confirmed it, in decision events (made before the check) the task
	// id the call claimed.
	ParentCallID string `json:"parent_call_id,omitempty"`
	// Cached marks a result served from the result cache (execution
	// events only): the tool did not run again.
	Cached bool `json:"cached,omitempty"`
	// Hooks lists what tool hooks changed in the call, in order: which
	// hook changed the arguments (their hashes before and after) or the
	// output (the changed output's hash). ArgsSHA256 stays the hash of
	// the arguments as the agent sent them.
	Hooks []HookChange `json:"hooks,omitempty"`
	// Judged is the policy gate's view of the call, on the events that
	// carry the gate's decision (DecidedBy ["policy"]): what it judged,
	// so that the call can be judged again under another policy
	// (toolctl policy replay). Absent from events written before it
	// existed and when the view could not be kept whole.
	Judged *Judged `json:"judged,omitempty"`
	// Confinement is what the kernel granted a bash call (executions):
	// which programs it could execute and how much of the workspace it
	// could write, as the sandbox applied them. An unrestricted
	// execution (a program that runs programs, a call people approved)
	// says so here.
	Confinement *Confinement `json:"confinement,omitempty"`
	// TraceID and SpanID name the span that recorded the event, when the
	// call carried trace context.
	TraceID string `json:"trace_id,omitempty"`
	SpanID  string `json:"span_id,omitempty"`
	// Chain names the chain of the worker run that wrote the event, Seq
	// its position in it (from 1), Prev the EventHash of the event
	// before it ("" for the first): the audit trail's tamper evidence.
	Chain string `json:"chain,omitempty"`
	Seq   uint64 `json:"seq,omitempty"`
	Prev  string `json:"prev,omitempty"`
}

// AuditLivenessPeriod is the longest a running worker goes without a
// checkpoint of its audit chain: a chain without its closing checkpoint
// whose last checkpoint is older than three of them has lost its worker,
// and its tail.
const AuditLivenessPeriod = time.Minute

// AuditCheckpointData is a worker's signed statement of its audit chain:
// Seq events long, the last one's EventHash being Head
// (dev.toolgate.audit.checkpoint.v1 on AuditCheckpointSubject).
type AuditCheckpointData struct {
	Chain  string    `json:"chain"`
	Seq    uint64    `json:"seq"`
	Head   string    `json:"head"`
	Worker string    `json:"worker"`
	Time   time.Time `json:"time"`
	// Opening marks a chain's first checkpoint (Seq 0), made when its
	// worker starts; Anchor names there the last checkpoint the audit
	// stream held then (another run's), as "<chain>:<seq>:<head>", so
	// that a whole chain removed is missed by the chain that came after
	// it.
	Opening bool   `json:"opening,omitempty"`
	Anchor  string `json:"anchor,omitempty"`
	// AnchorTime is when the checkpoint Anchor names was made: a chain
	// missing whose checkpoint is older than the audit stream's retention
	// expired rather than was removed.
	AnchorTime time.Time `json:"anchor_time,omitzero"`
	// Final marks a chain's closing checkpoint, its stopping worker's last
	// word: a chain without one has a live worker (whose checkpoints keep
	// coming, at least every minute) or lost its tail.
	Final bool `json:"final,omitempty"`
}

// ApprovalAudit records the people's decision on a parked call.
type ApprovalAudit struct {
	Outcome   string    `json:"outcome"`
	Approvers []string  `json:"approvers,omitempty"`
	Comment   string    `json:"comment,omitempty"`
	DecidedAt time.Time `json:"decided_at"`
	// OriginalArgsSHA256 is the args_sha256 of the arguments the call was
	// parked with, set when people approved it with changes (the event's
	// args_sha256 is then the edited arguments').
	OriginalArgsSHA256 string `json:"original_args_sha256,omitempty"`
	// EditedArguments are the arguments people changed the call to
	// (approve with changes); the call ran with them.
	EditedArguments json.RawMessage `json:"edited_arguments,omitempty"`
	// EditedArgsSHA256 is the approval hash the approvers signed of the
	// edited arguments (agent, tool and arguments; see APPROVALS.md).
	EditedArgsSHA256 string `json:"edited_args_sha256,omitempty"`
}

// ToolData is the data of tool.registered / tool.unregistered events.
type ToolData struct {
	Name        string          `json:"name"`
	Aliases     []string        `json:"aliases,omitempty"`
	Description string          `json:"description,omitempty"`
	Kind        string          `json:"kind,omitempty"`
	Version     string          `json:"version,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Worker      string          `json:"worker"`
	// WorkerVersion is the build of the worker that announced the tool
	// (module version and commit), so a fleet in the middle of a rollout
	// shows which build offers what.
	WorkerVersion string `json:"worker_version,omitempty"`
}

// ToolRefusedData is the data of a dev.toolgate.tool.refused.v1 event: a
// worker refused a remote tool's announcement, because the service that
// made it does not hold the credentials of the tool it names, or the
// definition cannot be registered.
type ToolRefusedData struct {
	// Name is the tool the announcement names.
	Name string `json:"name"`
	// Service and ServiceID are the micro service that announced it.
	Service   string `json:"service"`
	ServiceID string `json:"service_id,omitempty"`
	// Reason says why it was refused.
	Reason string `json:"reason"`
	Worker string `json:"worker"`
}

// ViolationData is the data of a dev.toolgate.policy.violation.v1 event,
// published for every deny and every ask.
type ViolationData struct {
	CallID    string `json:"call_id"`
	Agent     string `json:"agent"`
	Tool      string `json:"tool"`
	Action    string `json:"action"`
	Rule      string `json:"rule,omitempty"`
	Reason    string `json:"reason"`
	Offending string `json:"offending,omitempty"`
	Revision  string `json:"revision,omitempty"`
}

// PolicyChangeData is the data of policy.applied and policy.rejected events.
type PolicyChangeData struct {
	Source   string   `json:"source"` // "file:<path>" or "kv:<key>"
	Revision string   `json:"revision,omitempty"`
	Errors   []string `json:"errors,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	Worker   string   `json:"worker"`
}

// Confinement is what the sandbox granted a call: Exec says which
// programs it could execute ("restricted to the programs the gate
// resolved", or unrestricted and why), Write how much of the workspace it
// could write ("none", "named", "workspace").
type Confinement struct {
	Exec  string `json:"exec,omitempty"`
	Write string `json:"write,omitempty"`
}

// ConfinementOf is the confinement a tool's result metadata reports
// (the bash tool's "exec" and "write"); nil when it reports none.
func ConfinementOf(md map[string]any) *Confinement {
	exec, _ := md["exec"].(string)
	write, _ := md["write"].(string)
	if exec == "" && write == "" {
		return nil
	}
	return &Confinement{Exec: exec, Write: write}
}
