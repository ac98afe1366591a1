package events

import "encoding/json"

// Tool hooks: a worker asks a hook service, over NATS request/reply on
// the subject its configuration names (by convention
// toolgate.hook.<name>), about a call before it is judged (stage
// "before") and about its output once it ran (stage "after"). The
// messages are plain JSON, not CloudEvents, so that a hook can be
// written in any language with a NATS client.

// Hook stages.
const (
	HookBefore = "before"
	HookAfter  = "after"
)

// Hook actions a hook service answers.
const (
	HookPass   = "pass"   // nothing to change
	HookModify = "modify" // use the arguments (before) or output (after) of the response
	HookDeny   = "deny"   // refuse the call (before only), with a reason
	HookError  = "error"  // the hook failed, Reason says how: the call fails closed unless the hook is fail_open
)

// HookSubject is the conventional subject of the hook service name: the
// one the hook role may answer on.
func HookSubject(name string) string { return Prefix + ".hook." + name }

// HookRequest is what a worker sends a hook service.
type HookRequest struct {
	// Stage is "before" (the call is about to be judged) or "after" (the
	// tool ran; Output holds what it returned).
	Stage string `json:"stage"`
	// Hook is the hook's name in the worker's configuration.
	Hook      string `json:"hook"`
	CallID    string `json:"call_id"`
	Agent     string `json:"agent"`
	SessionID string `json:"session_id,omitempty"`
	// Tool is the canonical tool name.
	Tool string `json:"tool"`
	// Arguments are the call's arguments as they stand at this hook
	// (earlier hooks may have changed them), validated against the
	// tool's schema.
	Arguments json.RawMessage `json:"arguments"`
	// Approved marks a call people approved (resumed after parking).
	Approved bool `json:"approved,omitempty"`
	// Output is the tool's output, secrets already redacted, bounded by
	// the tool's output limit (stage after only).
	Output string `json:"output,omitempty"`
	// IsError reports the tool's own failure (stage after only).
	IsError bool `json:"is_error,omitempty"`
}

// HookResponse is what a hook service answers.
type HookResponse struct {
	// Action is "pass", "modify", "deny" (before only) or "error";
	// anything else is a failure of the hook too.
	Action string `json:"action"`
	// Arguments replace the call's arguments (before, modify): a JSON
	// object, validated against the tool's schema and judged by the
	// policy gate like the agent's own.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Output replaces the tool's output (after, modify).
	Output *string `json:"output,omitempty"`
	// Reason says why a call is denied (deny), shown to the agent, or
	// what failed (error).
	Reason string `json:"reason,omitempty"`
}

// HookChange records what one hook changed in a call, for the result and
// the audit: argument hashes (before) or the changed output's hash
// (after). Hashes are hex SHA-256 of the canonical JSON of the arguments
// and of the output text.
type HookChange struct {
	// Hook is the hook's name ("redact" for the built-in redaction).
	Hook string `json:"hook"`
	// Stage is "before" or "after".
	Stage string `json:"stage"`
	// ArgsSHA256Before and ArgsSHA256After are the arguments' hashes
	// before and after the hook changed them (stage before).
	ArgsSHA256Before string `json:"args_sha256_before,omitempty"`
	ArgsSHA256After  string `json:"args_sha256_after,omitempty"`
	// OutputSHA256 is the hash of the output as the hook changed it
	// (stage after); the output before the change is not hashed, so that
	// a hash never confirms a guessed secret.
	OutputSHA256 string `json:"output_sha256,omitempty"`
	// Note says more: what the redaction replaced, or that a failing hook
	// was passed over because it is configured fail_open.
	Note string `json:"note,omitempty"`
}
