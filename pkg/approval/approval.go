// Package approval is the wire contract of approvals: the request a parked
// call publishes, the signed decision a person's approver publishes, the
// hash that binds a decision to one exact call, the "always allow"
// amendment a decision may carry, and the clarify tool that asks a person a
// question along the same path. It knows nothing of NATS.
package approval

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/toolgate/toolgate/pkg/events"
)

// Subjects, CloudEvents types and key layout beyond those in pkg/events.
const (
	// TypeApprovalRefused is published when a worker refuses a decision
	// (bad signature, untrusted key, other hash, self-approval, ...).
	TypeApprovalRefused = "dev.toolgate.approval.refused.v1"
	// TypeApprovalResolved is published when a parked call reaches its
	// final status (approved, rejected, answered, expired).
	TypeApprovalResolved = "dev.toolgate.approval.resolved.v1"
)

// RefusedSubject is where the refusal of a decision on callID is published.
func RefusedSubject(callID string) string { return events.Prefix + ".approval.refused." + callID }

// ResolvedSubject is where the final status of callID is published.
func ResolvedSubject(callID string) string { return events.Prefix + ".approval.resolved." + callID }

// SubjectRequests matches every approval request.
const SubjectRequests = events.Prefix + ".approval.request.>"

// SubjectDecisions matches every decision.
const SubjectDecisions = events.Prefix + ".approval.decision.>"

// Outcome is what one person decided.
type Outcome string

// The outcomes of a decision.
const (
	// Approve lets the call run (once enough distinct people approved).
	Approve Outcome = "approve"
	// Reject refuses the call; it needs a reason.
	Reject Outcome = "reject"
	// Answer answers a clarify question; the answer is the tool's output.
	Answer Outcome = "answer"
)

// Status is the state of a parked call.
type Status string

// The states of a parked call. Every state but Pending is final.
const (
	Pending  Status = "pending"
	Approved Status = "approved"
	Rejected Status = "rejected"
	Answered Status = "answered"
	Expired  Status = "expired"
	// Cancelled: the calling agent cancelled the call while it waited;
	// its approval request is withdrawn.
	Cancelled Status = "cancelled"
)

// Final reports whether no decision changes s any more.
func (s Status) Final() bool { return s != Pending && s != "" }

// DefaultTimeout is how long a person has to decide when the rule that
// asked sets no approval timeout.
const DefaultTimeout = 10 * time.Minute

// Request is the data of a dev.toolgate.approval.requested.v1 event,
// published on toolgate.approval.request.<call id>.
type Request struct {
	// CallID is the parked call's id.
	CallID string `json:"call_id"`
	// Agent is the identity that made the call.
	Agent string `json:"agent"`
	// SessionID groups the agent's calls of one conversation.
	SessionID string `json:"session_id,omitempty"`
	// Tool is the canonical tool name.
	Tool string `json:"tool"`
	// Arguments are the exact arguments the decision is for.
	Arguments json.RawMessage `json:"arguments"`
	// ArgsSHA256 is ArgsHash(Agent, Tool, Arguments).
	ArgsSHA256 string `json:"args_sha256"`
	// Rule is the policy rule that asked.
	Rule string `json:"rule,omitempty"`
	// Reason is why it asked, for a person.
	Reason string `json:"reason,omitempty"`
	// Offending is the command or path of compound input that asked.
	Offending string `json:"offending,omitempty"`
	// Revision is the policy revision that asked.
	Revision string `json:"revision,omitempty"`
	// Approvers is how many distinct people must approve (at least 1).
	Approvers int `json:"approvers"`
	// Diff is what an edit or write would change, as a unified diff.
	Diff string `json:"diff,omitempty"`
	// Question is set for a clarify call: the question to answer.
	Question *Question `json:"question,omitempty"`
	// RequestedAt is when the call was parked.
	RequestedAt time.Time `json:"requested_at"`
	// ExpiresAt is the deadline for a decision.
	ExpiresAt time.Time `json:"expires_at"`
}

// Decision is the data of a dev.toolgate.approval.decided.v1 event,
// published on toolgate.approval.decision.<call id>, signed by the
// approver service's ed25519 nkey.
type Decision struct {
	// CallID is the call decided on.
	CallID string `json:"call_id"`
	// ArgsSHA256 is the hash of the call the person saw; a worker refuses
	// the decision when it is not the parked call's.
	ArgsSHA256 string `json:"args_sha256"`
	// Outcome is approve, reject or answer.
	Outcome Outcome `json:"outcome"`
	// Approver is the person's identity (from the approver's token file).
	Approver string `json:"approver"`
	// Comment is an optional remark on an approval.
	Comment string `json:"comment,omitempty"`
	// Reason says why a call was rejected; a rejection needs one.
	Reason string `json:"reason,omitempty"`
	// Answer answers a clarify question.
	Answer string `json:"answer,omitempty"`
	// AlwaysAllow, on an approval, asks for an amendment that allows calls
	// like this one from now on.
	AlwaysAllow *Amendment `json:"always_allow,omitempty"`
	// EditedArguments, on an approval, are the arguments the person
	// changed the call to ("approve with changes"), in canonical JSON: the
	// call runs with them instead of the parked ones. ArgsSHA256 still
	// names the parked call the person saw.
	EditedArguments json.RawMessage `json:"edited_arguments,omitempty"`
	// EditedArgsSHA256 is ArgsHash(agent, tool, EditedArguments): a worker
	// hashes the edited arguments again and refuses the decision when they
	// do not match. Set exactly when EditedArguments is.
	EditedArgsSHA256 string `json:"edited_args_sha256,omitempty"`
	// DecidedAt is when the person decided.
	DecidedAt time.Time `json:"decided_at"`
	// PublicKey is the signer's nkey public key (U...).
	PublicKey string `json:"public_key"`
	// SignerJWT is the signer's NATS user JWT (role approver), issued by
	// the toolgate account; it tells workers the key belongs to an
	// approver this install created. Empty for a key pinned in the
	// workers' configuration. It is covered by the signature.
	SignerJWT string `json:"signer_jwt,omitempty"`
	// Signature is the base64url ed25519 signature of SigningBytes.
	Signature string `json:"signature"`
}

// ErrInvalidDecision reports a decision that is malformed whatever the call.
var ErrInvalidDecision = errors.New("invalid decision")

// Validate checks the decision's own shape: a call id that is a subject
// token, a 64-hex-digit hash, a known outcome, an approver, a reason for a
// rejection, an answer for an answer, and an amendment only on an approval.
func (d *Decision) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidDecision, fmt.Sprintf(format, a...))
	}
	if err := events.ValidToken(d.CallID); err != nil {
		return bad("call_id: %v", err)
	}
	if !isHash(d.ArgsSHA256) {
		return bad("args_sha256: %q is not 64 lowercase hex digits", d.ArgsSHA256)
	}
	if strings.TrimSpace(d.Approver) == "" {
		return bad("approver: empty")
	}
	switch d.Outcome {
	case Approve:
	case Reject:
		if strings.TrimSpace(d.Reason) == "" {
			return bad("reason: a rejection needs a reason")
		}
	case Answer:
		if d.Answer == "" {
			return bad("answer: empty")
		}
	default:
		return bad("outcome: %q is not approve, reject or answer", d.Outcome)
	}
	if d.AlwaysAllow != nil && d.Outcome != Approve {
		return bad("always_allow: only an approval can carry one")
	}
	if err := d.validateEdit(); err != nil {
		return bad("%v", err)
	}
	if d.DecidedAt.IsZero() {
		return bad("decided_at: missing")
	}
	return nil
}
