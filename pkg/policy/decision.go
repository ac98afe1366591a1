// Package policy is toolgate's policy gate: the policy document, its
// evaluation into allow / ask / deny, and the shell and path analysis behind
// it. It knows nothing of NATS and is shared by the worker, toolctl and the
// approver.
package policy

import (
	"context"
	"strings"
	"time"
)

// Action is what the gate decides for a call.
type Action string

// The three actions, strictest last. Deny wins over ask, ask over allow.
const (
	Allow Action = "allow"
	Ask   Action = "ask"
	Deny  Action = "deny"
)

// Rank orders actions by strictness: allow 0, ask 1, deny 2. An unknown
// action ranks as deny so that it fails closed.
func (a Action) Rank() int {
	switch a {
	case Allow:
		return 0
	case Ask:
		return 1
	default:
		return 2
	}
}

// Kind classifies a tool for policies that target kinds of tools rather than
// names (read, write, execute, search, network, other).
type Kind string

// Tool kinds.
const (
	KindRead    Kind = "read"
	KindWrite   Kind = "write"
	KindExecute Kind = "execute"
	KindSearch  Kind = "search"
	KindNetwork Kind = "network"
	KindOther   Kind = "other"
)

// Request is what the gate judges: one call of one tool by one agent.
type Request struct {
	// Agent is the caller's identity (the subject token, never the payload).
	Agent string
	// Tool is the canonical tool name (aliases already resolved), or the name
	// as called when the tool is unknown.
	Tool string
	// Known is false when no registered tool has that name.
	Known bool
	// Kind is the tool's kind; empty for unknown tools.
	Kind Kind
	// Arguments are the decoded, schema-valid arguments.
	Arguments map[string]any
	// Workspace is the absolute workspace root paths are resolved against.
	Workspace string
}

// Decision is the gate's verdict on a Request.
type Decision struct {
	// Action is allow, ask or deny.
	Action Action `json:"action"`
	// Reason says why, for a person.
	Reason string `json:"reason"`
	// Rule is the id of the rule that decided, e.g. tools.run_shell.blacklist[0].
	Rule string `json:"rule,omitempty"`
	// Offending is the command or path of compound input that decided.
	Offending string `json:"offending,omitempty"`
	// Revision identifies the policy document that decided.
	Revision string `json:"revision,omitempty"`
	// Timeout, when set, overrides the tool's default timeout.
	Timeout time.Duration `json:"timeout,omitempty"`
	// ApprovalTimeout, when set for an ask, is how long a person has to decide.
	ApprovalTimeout time.Duration `json:"approval_timeout,omitempty"`
	// Approvers, when set for an ask, is how many distinct people must approve.
	Approvers int `json:"approvers,omitempty"`
	// MaxBytes, when set, is the largest file a read may return
	// (constraints.max_size).
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// MaxResults, when set, bounds the results of a search or listing
	// (constraints.max_results).
	MaxResults int `json:"max_results,omitempty"`
	// Paths, on an allow that no amendment made, are the real paths the
	// gate resolved and allowed for the call's path arguments, as
	// CheckPath would judge them under the same revision: a file opened
	// at one of them needs no second judgement.
	Paths []string `json:"-"`
	// Command, when Rendered, is the command line a shell tool runs: the
	// gate rendered it from the syntax tree of the call's command and
	// judged the tree of this very text (shell.Script.Rendered), so that
	// what runs is what was judged. The bash tool runs it instead of the
	// command as the agent wrote it.
	Command string `json:"-"`
	// Rendered reports that Command is set (it may be empty: a command
	// of comments only renders to nothing).
	Rendered bool `json:"-"`
	// Programs, on an allow of a shell tool that no amendment made, are
	// the real paths of the system programs the gate resolved for the
	// command's simple commands (wrappers included): the only programs a
	// sandbox that can enforce it lets the call execute, besides the
	// shell, their interpreters and the helpers they are known to run.
	Programs []string `json:"-"`
	// Access, on a decision of a shell tool that is not a deny, is what
	// the gate judged the command may read, write and execute: a sandbox
	// that can enforce it grants the call exactly that.
	Access *Access `json:"-"`
}

// amendmentRule prefixes the rule of a decision an amendment made.
const amendmentRule = "amendments["

// Amended reports whether an amendment (a person's standing approval)
// turned the gate's ask into this allow: the gate did not allow the call
// by itself, and resolved nothing of it (Paths, Programs).
func (d Decision) Amended() bool { return strings.HasPrefix(d.Rule, amendmentRule) }

// Evaluator judges requests. *Gate implements it; AllowAll is the permissive
// default used where no policy is configured.
type Evaluator interface {
	Evaluate(ctx context.Context, req Request) Decision
}

// EvaluatorFunc adapts a function to Evaluator.
type EvaluatorFunc func(ctx context.Context, req Request) Decision

// Evaluate calls f.
func (f EvaluatorFunc) Evaluate(ctx context.Context, req Request) Decision { return f(ctx, req) }

// AllowAll allows every call. It is what a worker uses with no policy.
var AllowAll Evaluator = EvaluatorFunc(func(context.Context, Request) Decision {
	return Decision{Action: Allow, Reason: "no policy configured", Rule: "builtin.allow_all"}
})

// PathChecker is implemented by evaluators that also judge the real path of
// a file a tool has opened (after symlinks), so that a link named notes.txt
// pointing at secrets/server.pem is caught by a denied_paths glob.
type PathChecker interface {
	CheckPath(req Request, realPath string) Decision
}

// Revisioned is implemented by evaluators that say which revision of
// their policy is in force, as their decisions carry it (Revision).
type Revisioned interface {
	Revision() string
}
