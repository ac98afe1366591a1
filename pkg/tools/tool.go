// Package tools holds what a tool is, the Registry of tools, and the
// execution pipeline a call passes through: look up, validate, policy,
// timeout, execute, bound the output. It knows nothing of NATS: the worker
// adapts messages to Calls and Results to messages.
package tools

import (
	"context"
	"encoding/json"
	"time"

	"github.com/toolgate/toolgate/pkg/policy"
)

// Defaults applied to tools that leave the field zero.
const (
	DefaultTimeout   = 60 * time.Second
	DefaultMaxOutput = 30000 // characters (runes), seed 004 §6
)

// Annotations are hints about a tool's behaviour, as in MCP tool annotations.
type Annotations struct {
	ReadOnly    bool `json:"read_only,omitempty"`
	Destructive bool `json:"destructive,omitempty"`
	Idempotent  bool `json:"idempotent,omitempty"`
	OpenWorld   bool `json:"open_world,omitempty"`
}

// Tool is one registered tool: its contract (name, schema) and its Handler.
type Tool struct {
	// Name is unique in a registry and is the <tool> subject token.
	Name string `json:"name"`
	// Aliases are other names that resolve to this tool.
	Aliases []string `json:"aliases,omitempty"`
	// Description tells a model what the tool does.
	Description string `json:"description"`
	// Parameters is the JSON Schema of the arguments object.
	Parameters json.RawMessage `json:"parameters"`
	// Kind is the tool's kind for policies (read, write, execute, ...).
	Kind policy.Kind `json:"kind"`
	// Category is "builtin", "mcp", "remote" or "custom".
	Category string `json:"category,omitempty"`
	// Tags are free-form labels.
	Tags []string `json:"tags,omitempty"`
	// Version is the tool's version.
	Version string `json:"version,omitempty"`
	// DefaultTimeout bounds one execution; zero means DefaultTimeout.
	DefaultTimeout time.Duration `json:"default_timeout,omitempty"`
	// MaxTimeout is the most a caller may ask for; zero means DefaultTimeout.
	MaxTimeout time.Duration `json:"max_timeout,omitempty"`
	// TimeoutArgument names an integer argument in milliseconds through
	// which a model sets this call's timeout (bash's "timeout"); the
	// pipeline honours it up to MaxTimeout. Empty means none.
	TimeoutArgument string `json:"timeout_argument,omitempty"`
	// MaxOutput bounds the output in characters; zero means DefaultMaxOutput.
	MaxOutput int `json:"max_output,omitempty"`
	// Annotations are behaviour hints.
	Annotations Annotations `json:"annotations"`
	// Pure marks a tool whose run changes nothing outside its result:
	// it only reads the workspace (the built-in read, ls, glob and grep).
	// A worker runs an allowed call of a pure tool without first claiming
	// it in the calls bucket: a redelivery may run it again, which
	// changes nothing, and its result is stored once under the call's
	// dedup id. Only code sets it: it is never read from an announcement
	// or a tool server's hints, which Annotations carry.
	Pure bool `json:"-"`
	// Handler runs the tool.
	Handler Handler `json:"-"`
}

func (t *Tool) timeout() time.Duration {
	if t.DefaultTimeout > 0 {
		return t.DefaultTimeout
	}
	return DefaultTimeout
}

func (t *Tool) maxTimeout() time.Duration {
	if t.MaxTimeout > 0 {
		return t.MaxTimeout
	}
	return t.timeout()
}

func (t *Tool) maxOutput() int {
	if t != nil && t.MaxOutput > 0 {
		return t.MaxOutput
	}
	return DefaultMaxOutput
}

// Bound cuts out's content to the tool's output bound (DefaultMaxOutput
// for a nil tool) and marks the cut in its metadata (truncated,
// truncated_chars), as the pipeline does to every output.
func (t *Tool) Bound(out *Output) {
	if s, cut := Truncate(out.Content, t.maxOutput()); cut > 0 {
		out.Content = s
		if out.Metadata == nil {
			out.Metadata = map[string]any{}
		}
		out.Metadata["truncated"] = true
		out.Metadata["truncated_chars"] = cut
	}
}

// Spec is the listing of a tool for a language model.
type Spec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Call is one invocation of a tool as it travels the pipeline.
type Call struct {
	// ID is the call id (the CloudEvent id).
	ID string
	// Agent is the caller's identity.
	Agent string
	// SessionID groups calls of one conversation.
	SessionID string
	// Name is the tool name as called (may be an alias).
	Name string
	// Arguments is the raw JSON arguments object.
	Arguments json.RawMessage
	// Timeout is the caller's requested timeout; zero means the tool's.
	Timeout time.Duration
	// Progress, if set, receives output chunks while the tool runs:
	// stream is StreamStdout, StreamStderr, StreamStatus (a note on how far
	// the tool got) or a name of the tool's own. Any tool may call it, from
	// any goroutine, as often as it likes: ProgressLimit's middleware
	// coalesces and bounds what is sent, and it never blocks for long.
	Progress func(stream, chunk string)
	// Approved marks a call resumed after people approved it: an ask from
	// the gate no longer parks it, a deny still refuses it.
	Approved bool
	// Approvals is how many distinct people approved a resumed call, when
	// known: an ask that now needs more approvers (the policy changed
	// since) refuses the call instead of running it. Zero skips the count.
	Approvals int
	// Start, when set, is called once the gate has allowed the call,
	// before anything runs it (extra middleware, the tool); an error
	// stops the call with that error. A runner uses it to claim the call
	// just in time.
	Start func(ctx context.Context) error
	// JudgeOnly stops an allowed (or approved) call right after Start,
	// before any later middleware or the tool: its Output says it may
	// run, with metadata judge_only, and nothing is executed.
	JudgeOnly bool
	// ParentCallID is the task call this call serves, as the caller
	// claims it (events.CallData.ParentCallID); the delegation middleware
	// checks the claim against the task record and sets Parent.
	ParentCallID string
	// Parent is set once the task a sub-agent's call serves is verified:
	// who delegated it, the allowed tools, and whose budget the call
	// counts against. Nil for a call that serves no task.
	Parent *Parent

	// Tool is set by the pipeline once the name is resolved.
	Tool *Tool
	// Args is set by the pipeline once the arguments are validated.
	Args map[string]any
	// Decision is set by the pipeline once the gate has judged.
	Decision *policy.Decision
	// CheckPath is set by the pipeline when the gate judges real paths:
	// file tools call it with the real path of every file they open (or
	// create) and refuse the access when it returns an error. Nil means
	// no path rules apply.
	CheckPath func(realPath string) error
	// Hooks records what tool hooks changed in the call, in order.
	Hooks []HookChange

	validated json.RawMessage // the arguments Args was validated from
}

// HookChange records what one tool hook changed in a call: the
// arguments' hashes before and after (stage before) or the changed
// output's hash (stage after). It has the fields of events.HookChange,
// which the worker converts it to.
type HookChange struct {
	Hook             string
	Stage            string
	ArgsSHA256Before string
	ArgsSHA256After  string
	OutputSHA256     string
	Note             string
}

// Output is what a tool returns.
type Output struct {
	// Content is the text given back to the model.
	Content string `json:"content"`
	// IsError marks a failure of the tool itself (file missing, exit code).
	IsError bool `json:"is_error"`
	// Metadata holds structured extras (total_lines, exit_code, truncated).
	Metadata map[string]any `json:"metadata,omitempty"`
	// Cached marks an output served from the result cache: the tool did
	// not run for this call.
	Cached bool `json:"cached,omitempty"`
}

// Handler runs a call. Tools return their own failures as an Output with
// IsError set; an error return is for conditions of the pipeline (unknown
// tool, invalid arguments, denied, timeout) and is mapped to a status once.
type Handler interface {
	Handle(ctx context.Context, c *Call) (*Output, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, c *Call) (*Output, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, c *Call) (*Output, error) { return f(ctx, c) }

// Middleware wraps a Handler with one cross-cutting step.
type Middleware func(Handler) Handler

// Chain wraps h in mws, the first outermost.
func Chain(h Handler, mws ...Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}
