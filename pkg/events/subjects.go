package events

import (
	"errors"
	"fmt"
	"strings"
)

// Subject roots. Every subject toolgate uses starts with Prefix.
const (
	Prefix = "toolgate"

	// SubjectCalls matches every call: toolgate.call.<agent>.<tool>.
	SubjectCalls = Prefix + ".call.>"
	// SubjectResults matches every result: toolgate.result.<agent>.<call id>.
	SubjectResults = Prefix + ".result.>"
	// SubjectProgress matches progress chunks: toolgate.progress.<agent>.<call id>.
	SubjectProgress = Prefix + ".progress.>"
	// SubjectEvents matches domain events: toolgate.event.<kind>.<name>.
	SubjectEvents = Prefix + ".event.>"
	// SubjectAudit matches audit events: toolgate.audit.<agent>.<tool>.
	SubjectAudit = Prefix + ".audit.>"
	// SubjectApprovals matches approval requests and decisions.
	SubjectApprovals = Prefix + ".approval.>"
)

// ErrBadToken reports a subject token that is empty or holds a character NATS
// gives meaning to.
var ErrBadToken = errors.New("invalid subject token")

// ValidToken checks that s can stand as one subject token: non-empty, at most
// 128 bytes, and none of '.', '*', '>', whitespace or control characters.
func ValidToken(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty", ErrBadToken)
	}
	if len(s) > 128 {
		return fmt.Errorf("%w: %q is longer than 128 bytes", ErrBadToken, s[:32]+"...")
	}
	for _, r := range s {
		if r == '.' || r == '*' || r == '>' || r <= ' ' || r == 0x7f {
			return fmt.Errorf("%w: %q contains %q", ErrBadToken, s, r)
		}
	}
	return nil
}

// CallSubject is where an agent publishes a call of tool.
func CallSubject(agent, tool string) string { return Prefix + ".call." + agent + "." + tool }

// ResultSubject is where the result of call id for agent is published.
func ResultSubject(agent, callID string) string {
	return Prefix + ".result." + agent + "." + callID
}

// ResultsOf matches every result for agent.
func ResultsOf(agent string) string { return Prefix + ".result." + agent + ".*" }

// ProgressSubject is where progress chunks of a running call are published.
func ProgressSubject(agent, callID string) string {
	return Prefix + ".progress." + agent + "." + callID
}

// AuditSubject is where the audit event of a call is published.
func AuditSubject(agent, tool string) string { return Prefix + ".audit." + agent + "." + tool }

// AuditCheckpointSubject is where worker publishes the checkpoints of its
// audit chain: toolgate.audit.$chain.<worker> ('$' is in no agent name).
func AuditCheckpointSubject(worker string) string { return Prefix + ".audit.$chain." + worker }

// ToolEventSubject is where registry changes of tool are published.
func ToolEventSubject(tool string) string { return Prefix + ".event.tool." + tool }

// ToolRefusedSubject is where a worker publishes that it refused a remote
// tool's announcement naming tool. It is outside toolgate.event.tool.>,
// which agents follow for the tools they may call.
func ToolRefusedSubject(tool string) string { return Prefix + ".event.tool_refused." + tool }

// ViolationSubject is where policy violations by agent are published.
func ViolationSubject(agent string) string { return Prefix + ".event.policy." + agent }

// PolicyChangeSubject is where policy changes are published.
const PolicyChangeSubject = Prefix + ".event.policy_change"

// ApprovalRequestSubject is where a parked call asks for a decision.
func ApprovalRequestSubject(callID string) string { return Prefix + ".approval.request." + callID }

// ApprovalDecisionSubject is where a decision on a parked call is published.
func ApprovalDecisionSubject(callID string) string {
	return Prefix + ".approval.decision." + callID
}

// ParseCallSubject splits toolgate.call.<agent>.<tool> into its identity and
// tool tokens.
func ParseCallSubject(subject string) (agent, tool string, err error) {
	// Cut, not Split: every call's subject is parsed a few times on its
	// way, and Split allocates.
	rest, ok := strings.CutPrefix(subject, Prefix+".call.")
	agent, tool, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || strings.Contains(tool, ".") {
		return "", "", fmt.Errorf("subject %q is not %s.call.<agent>.<tool>", subject, Prefix)
	}
	return agent, tool, nil
}

// AgentSource is the CloudEvents source an agent must use.
func AgentSource(agent string) string { return "agent://" + agent }

// SourceAgent returns the agent named by an agent://<id> source.
func SourceAgent(source string) (string, bool) {
	id, ok := strings.CutPrefix(source, "agent://")
	if !ok || id == "" || strings.ContainsAny(id, "/?#") {
		return "", false
	}
	return id, true
}

// SubjectToolsList is a request/reply subject any worker answers with the
// registry listing (JSON array of ToolData).
const SubjectToolsList = Prefix + ".api.tools"

// ToolsListSubject is where agent asks for its own listing (the registry
// without what its policy denies outright): its credentials let it ask on
// its own name only, so a worker knows whom it answers. From the agents
// account, where the reply of a crossing request names no one, it is the
// only way to a per-agent listing.
func ToolsListSubject(agent string) string { return SubjectToolsList + "." + agent }
