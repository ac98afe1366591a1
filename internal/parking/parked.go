// Package parking parks calls the policy gate asked about and resumes them
// once people decide: the parked record in a JetStream key-value bucket,
// the approval request on the approvals stream, and the Manager every
// worker runs, which consumes signed decisions from a durable consumer they
// share, accumulates approvals up to the rule's threshold with
// compare-and-set, expires calls past their deadline, and resumes each
// decided call once. The wire types live in pkg/approval.
package parking

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrNotFound: no parked call has that id.
	ErrNotFound = errors.New("no parked call with that id")
	// ErrConflict: a different call is already parked under that id.
	ErrConflict = errors.New("another call is parked under that id")
	// ErrInvalidParked: the parked call is malformed.
	ErrInvalidParked = errors.New("invalid parked call")
)

// Key prefixes in the approvals bucket.
const (
	callKeyPrefix     = "call."
	approverKeyPrefix = "approver."
)

// CallKey is the approvals-bucket key of the call callID of agent:
// call.<agent>.<id>, each token itself when made of key-safe characters
// (and not starting with '='), else '=' and its base64url. A call id
// names a call only with its agent: two agents' calls of one id are two
// records, and neither can take the other's key.
func CallKey(agent, callID string) string {
	return callKeyPrefix + keyToken(agent) + "." + keyToken(callID)
}

// keyToken is s as one key token.
func keyToken(s string) string {
	safe := s != "" && s[0] != '='
	for _, r := range s {
		if !(r == '-' || r == '_' || r == '=' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "=" + base64.RawURLEncoding.EncodeToString([]byte(s))
}

// Claim says which worker resumes a decided call, until when.
type Claim struct {
	// Worker is the claiming worker's name.
	Worker string `json:"worker"`
	// Until is when the claim lapses unless renewed; a lapsed claim may be
	// taken by any worker.
	Until time.Time `json:"until"`
}

// Outcome is what people decided about a parked call, handed to the resume
// callback.
type Outcome struct {
	// Status is approved, rejected, answered or expired.
	Status approval.Status `json:"status"`
	// Approvers lists the people who approved, answered or rejected.
	Approvers []string `json:"approvers,omitempty"`
	// Comment joins the approvers' comments.
	Comment string `json:"comment,omitempty"`
	// Reason is the rejection's reason, or why the call expired.
	Reason string `json:"reason,omitempty"`
	// Answer is the answer to a clarify question.
	Answer string `json:"answer,omitempty"`
	// DefaultAnswer is true when a clarify question timed out and its
	// default answer was used.
	DefaultAnswer bool `json:"default_answer,omitempty"`
	// Amendments are the "always allow" amendments stored with the approval.
	Amendments []approval.Amendment `json:"amendments,omitempty"`
	// EditedArguments are the arguments the approvers changed the call to
	// (approve with changes), which it runs with; nil runs it as parked.
	EditedArguments json.RawMessage `json:"edited_arguments,omitempty"`
	// EditedArgsSHA256 is the approval hash (approval.ArgsHash) of
	// EditedArguments, which the approvals signed.
	EditedArgsSHA256 string `json:"edited_args_sha256,omitempty"`
	// DecidedAt is when the outcome became final.
	DecidedAt time.Time `json:"decided_at"`
}

// Audit is the outcome as the audit event records it.
func (o Outcome) Audit() *events.ApprovalAudit {
	c := o.Comment
	if o.Reason != "" {
		c = strings.TrimSpace(o.Reason + "; " + c)
		c = strings.TrimSuffix(c, ";")
	}
	a := &events.ApprovalAudit{Outcome: string(o.Status), Approvers: o.Approvers, Comment: c, DecidedAt: o.DecidedAt}
	if len(o.EditedArguments) > 0 {
		a.EditedArguments, a.EditedArgsSHA256 = o.EditedArguments, o.EditedArgsSHA256
	}
	return a
}

// Parked is a call waiting for people, as stored in the approvals bucket
// under CallKey(Agent, CallID). It carries everything a worker needs to resume
// the call on any machine, after any restart.
type Parked struct {
	// CallID is the call id.
	CallID string `json:"call_id"`
	// Agent is the caller's identity.
	Agent string `json:"agent"`
	// SessionID groups the agent's calls.
	SessionID string `json:"session_id,omitempty"`
	// Tool is the canonical tool name.
	Tool string `json:"tool"`
	// Arguments are the call's exact arguments.
	Arguments json.RawMessage `json:"arguments"`
	// ArgsSHA256 binds decisions to (Agent, Tool, Arguments); Park sets it.
	ArgsSHA256 string `json:"args_sha256"`
	// TimeoutMS is the caller's requested tool timeout, if any.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Decision is the gate's ask: rule, reason, threshold, approval timeout.
	Decision policy.Decision `json:"decision"`
	// Diff is what an edit or write would change (set by the worker).
	Diff string `json:"diff,omitempty"`
	// Question is set for a clarify call.
	Question *approval.Question `json:"question,omitempty"`
	// Meta holds what the worker needs to resume the call (content mode,
	// trace context); the Manager does not read it.
	Meta map[string]string `json:"meta,omitempty"`
	// Worker names the worker that parked the call.
	Worker string `json:"worker,omitempty"`

	// Status is pending until the call is decided or expires.
	Status approval.Status `json:"status"`
	// ParkedAt is when the call was parked.
	ParkedAt time.Time `json:"parked_at"`
	// ExpiresAt is the deadline for a decision.
	ExpiresAt time.Time `json:"expires_at"`
	// Approvals are the verified approvals so far, one per person.
	Approvals []approval.Decision `json:"approvals,omitempty"`
	// Final is the decision that made the outcome final (nil for expiry).
	Final *approval.Decision `json:"final,omitempty"`
	// Outcome is set once Status is final.
	Outcome *Outcome `json:"outcome,omitempty"`
	// Claim names the worker resuming the call.
	Claim *Claim `json:"claim,omitempty"`
	// Resumed is set once the resume callback returned without error.
	Resumed bool `json:"resumed,omitempty"`
	// ResumedAt is when it did.
	ResumedAt time.Time `json:"resumed_at,omitzero"`
	// ResumeAttempts counts failed resume attempts.
	ResumeAttempts int `json:"resume_attempts,omitempty"`
	// ResumeError is the last resume failure.
	ResumeError string `json:"resume_error,omitempty"`
}

// Threshold is how many distinct people must approve: the rule's
// Approvers, at least 1.
func (p *Parked) Threshold() int { return max(p.Decision.Approvers, 1) }

// IsClarify reports whether the parked call is a clarify question.
func (p *Parked) IsClarify() bool { return p.Question != nil }

// Request is the approval request published for the parked call.
func (p *Parked) Request() approval.Request {
	return approval.Request{
		CallID: p.CallID, Agent: p.Agent, SessionID: p.SessionID, Tool: p.Tool,
		Arguments: p.Arguments, ArgsSHA256: p.ArgsSHA256,
		Rule: p.Decision.Rule, Reason: p.Decision.Reason, Offending: p.Decision.Offending,
		Revision: p.Decision.Revision, Approvers: p.Threshold(), Diff: p.Diff,
		Question: p.Question, RequestedAt: p.ParkedAt, ExpiresAt: p.ExpiresAt,
	}
}

// ApprovedBy lists who approved so far.
func (p *Parked) ApprovedBy() []string {
	var out []string
	for _, d := range p.Approvals {
		out = append(out, d.Approver)
	}
	return out
}

// NewParked builds the parked record of a call the pipeline ended with
// pk (the gate asked, or the tool asks a question): c must be resolved and
// validated (c.Tool and c.Args set). A call waiting for an answer gets
// pk's question, and edit/write calls a diff from their arguments; the
// worker may replace Diff with one computed against the file.
func NewParked(c *tools.Call, pk *tools.Parked) (*Parked, error) {
	if c == nil || pk == nil {
		return nil, fmt.Errorf("%w: nil call", ErrInvalidParked)
	}
	tool := c.Name
	if c.Tool != nil {
		tool = c.Tool.Name
	}
	p := &Parked{
		CallID: c.ID, Agent: c.Agent, SessionID: c.SessionID, Tool: tool,
		Arguments: c.Arguments, TimeoutMS: c.Timeout.Milliseconds(), Decision: pk.Decision,
	}
	if len(p.Arguments) == 0 {
		p.Arguments = json.RawMessage("{}")
	}
	if pk.NeedsAnswer() {
		if strings.TrimSpace(pk.Question.Text) == "" {
			return nil, fmt.Errorf("%w: call %s: question: empty", ErrInvalidParked, c.ID)
		}
		q := *pk.Question
		p.Question = &q
		p.Decision.Approvers = 1
	} else {
		p.Diff = approval.ArgsDiff(tool, c.Args)
	}
	return p, nil
}

// prepare checks p and fills what Park sets: hash, status, times.
func (p *Parked) prepare(now time.Time, def time.Duration) error {
	if err := events.ValidToken(p.CallID); err != nil {
		return fmt.Errorf("%w: call_id: %v", ErrInvalidParked, err)
	}
	if p.Agent == "" {
		return fmt.Errorf("%w: call %s: agent: empty", ErrInvalidParked, p.CallID)
	}
	if p.Tool == "" {
		return fmt.Errorf("%w: call %s: tool: empty", ErrInvalidParked, p.CallID)
	}
	if len(p.Arguments) == 0 {
		p.Arguments = json.RawMessage("{}")
	}
	p.ArgsSHA256 = approval.ArgsHash(p.Agent, p.Tool, p.Arguments)
	p.Status = approval.Pending
	p.Approvals, p.Final, p.Outcome, p.Claim, p.Resumed = nil, nil, nil, nil, false
	if p.ParkedAt.IsZero() {
		p.ParkedAt = now
	}
	p.ParkedAt = p.ParkedAt.UTC()
	if p.ExpiresAt.IsZero() {
		t := def
		if p.Decision.ApprovalTimeout > 0 {
			t = p.Decision.ApprovalTimeout
		}
		if p.Question != nil && p.Question.Timeout > 0 {
			t = p.Question.Timeout
		}
		p.ExpiresAt = p.ParkedAt.Add(t)
	}
	p.ExpiresAt = p.ExpiresAt.UTC()
	return nil
}
