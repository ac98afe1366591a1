package tools

import (
	"errors"
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/pkg/policy"
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrUnknownTool: no tool of that name or alias is registered.
	ErrUnknownTool = errors.New("unknown tool")
	// ErrInvalidArguments: the arguments do not satisfy the tool's schema.
	ErrInvalidArguments = errors.New("invalid arguments")
	// ErrDenied: the policy gate refused the call.
	ErrDenied = errors.New("denied by policy")
	// ErrApprovalRequired: the policy gate asks a person first.
	ErrApprovalRequired = errors.New("approval required")
	// ErrTimeout: the tool ran past its timeout.
	ErrTimeout = errors.New("tool timed out")
	// ErrPanic: the tool panicked; the pipeline recovered.
	ErrPanic = errors.New("tool panicked")
	// ErrDuplicate: a tool of that name or alias is already registered.
	ErrDuplicate = errors.New("duplicate tool name")
	// ErrInvalidTool: a tool definition is unusable (empty name, bad schema).
	ErrInvalidTool = errors.New("invalid tool definition")
	// ErrCancelled: the caller cancelled the call; a tool stopped by it
	// returns an error wrapping it (or the context's).
	ErrCancelled = errors.New("cancelled by the caller")
	// ErrBudgetExceeded: a budget the call counts against is spent; the
	// call did not run.
	ErrBudgetExceeded = errors.New("budget exceeded")
)

// UnknownToolError names the tool asked for and the tools available.
type UnknownToolError struct {
	Name      string
	Available []string
}

// Error says what is wrong, for a person.
func (e *UnknownToolError) Error() string {
	return fmt.Sprintf("unknown tool %q; available tools: %s", e.Name, strings.Join(e.Available, ", "))
}

// Unwrap makes errors.Is(err, ErrUnknownTool) true.
func (e *UnknownToolError) Unwrap() error { return ErrUnknownTool }

// FieldError is one failed schema rule at one place of the arguments.
type FieldError struct {
	// Field is a JSON pointer into the arguments ("/path", "/edits/0/old_string");
	// empty for the object itself.
	Field string `json:"field"`
	// Message says which rule failed.
	Message string `json:"message"`
}

// ArgumentError lists every schema failure of a call's arguments.
type ArgumentError struct {
	Tool   string
	Fields []FieldError
}

// Error says what is wrong, for a person.
func (e *ArgumentError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "invalid arguments for %s:", e.Tool)
	for i, f := range e.Fields {
		if i > 0 {
			b.WriteString(";")
		}
		field := strings.TrimPrefix(f.Field, "/")
		if field == "" {
			field = "(arguments)"
		}
		fmt.Fprintf(&b, " %s: %s", field, f.Message)
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalidArguments) true.
func (e *ArgumentError) Unwrap() error { return ErrInvalidArguments }

// PolicyError carries the gate's decision for a call it denied. (A call
// the gate asks about ends with a *Parked instead.)
type PolicyError struct {
	Decision policy.Decision
}

// Error says what is wrong, for a person.
func (e *PolicyError) Error() string {
	msg := fmt.Sprintf("%s by policy: %s", e.Decision.Action, e.Decision.Reason)
	if e.Decision.Rule != "" {
		msg += " (rule " + e.Decision.Rule + ")"
	}
	return msg
}

// Unwrap maps deny to ErrDenied and ask to ErrApprovalRequired.
func (e *PolicyError) Unwrap() error {
	if e.Decision.Action == policy.Ask {
		return ErrApprovalRequired
	}
	return ErrDenied
}
