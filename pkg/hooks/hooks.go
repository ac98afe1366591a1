// Package hooks runs tool hooks around a call (seed 004 section 4): before
// hooks see the tool, the arguments and the agent and may pass, change the
// arguments or deny the call; after hooks may change the output. Hooks run
// in-process (BeforeHook, AfterHook) or as services answering NATS
// requests (Remote, Serve), in a configured order, each with a timeout; a
// hook that fails or does not answer fails the call closed unless it is
// configured fail_open. A built-in after hook (Redactor) replaces secrets
// in every output and progress chunk.
//
// The Chain's two middlewares plug into the tool pipeline with
// tools.WithHooks: arguments a before hook changes are validated again and
// judged by the policy gate like the agent's own, so a hook is never a way
// around a deny. These are not the PreToolUse hooks of Claude Code and
// Codex (internal/hookgate), which send an agent's own calls to the gate.
package hooks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	papproval "github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// Call is what a hook sees of a call.
type Call struct {
	ID        string
	Agent     string
	SessionID string
	// Tool is the canonical tool name.
	Tool string
	// Arguments are the call's arguments as they stand at this hook.
	Arguments json.RawMessage
	// Approved marks a call people approved.
	Approved bool
}

// Action is a before hook's verdict.
type Action string

// The verdicts of a before hook.
const (
	Pass   Action = events.HookPass
	Modify Action = events.HookModify
	Deny   Action = events.HookDeny
)

// Verdict is what a before hook decides.
type Verdict struct {
	Action Action
	// Arguments replace the call's arguments (Modify): a JSON object.
	Arguments json.RawMessage
	// Reason says why the call is denied (Deny).
	Reason string
}

// Output is what an after hook sees of the tool's output.
type Output struct {
	Content string
	IsError bool
}

// BeforeHook looks at a call before the policy gate judges it.
type BeforeHook interface {
	Before(ctx context.Context, c *Call) (Verdict, error)
}

// AfterHook looks at a call's output and returns it, changed or not.
type AfterHook interface {
	After(ctx context.Context, c *Call, out Output) (string, error)
}

// BeforeFunc adapts a function to BeforeHook.
type BeforeFunc func(ctx context.Context, c *Call) (Verdict, error)

// Before calls f.
func (f BeforeFunc) Before(ctx context.Context, c *Call) (Verdict, error) { return f(ctx, c) }

// AfterFunc adapts a function to AfterHook.
type AfterFunc func(ctx context.Context, c *Call, out Output) (string, error)

// After calls f.
func (f AfterFunc) After(ctx context.Context, c *Call, out Output) (string, error) {
	return f(ctx, c, out)
}

// Errors callers branch on.
var (
	// ErrHook wraps every failure of a hook: an error, no answer in time,
	// an answer that is not a verdict.
	ErrHook = errors.New("hook failed")
	// ErrConfig wraps every problem of a hooks configuration.
	ErrConfig = errors.New("invalid hooks configuration")
)

// DefaultTimeout bounds one hook's answer when its configuration does not.
const DefaultTimeout = 5 * time.Second

// Hook is one hook in a chain: a before hook, an after hook, or both.
type Hook struct {
	// Name identifies the hook in results, audit and denials.
	Name string
	// Before, when set, runs before the gate.
	Before BeforeHook
	// After, when set, runs on the output.
	After AfterHook
	// Timeout bounds one answer; zero means DefaultTimeout.
	Timeout time.Duration
	// FailOpen passes over a hook that fails instead of denying the call
	// (before) or withholding the output (after).
	FailOpen bool
	// Tools limits the hook to these tools (canonical names); empty means
	// every tool.
	Tools []string
}

func (h *Hook) applies(tool string) bool { return len(h.Tools) == 0 || slices.Contains(h.Tools, tool) }

func (h *Hook) timeout() time.Duration {
	if h.Timeout > 0 {
		return h.Timeout
	}
	return DefaultTimeout
}

// Chain runs hooks in order around calls. The zero value runs nothing;
// use New.
type Chain struct {
	hooks    []Hook
	redactor *Redactor
	log      *slog.Logger
	failures metric.Int64Counter
	counts   *counts
}

// Options configure a Chain.
type Options struct {
	// Redactor replaces secrets in outputs and progress; nil turns the
	// redaction off.
	Redactor *Redactor
	// Logger receives hook failures; default slog.Default().
	Logger *slog.Logger
	// Meter, when set, counts hook failures (toolgate.hook.failures).
	Meter metric.Meter
}

// New returns a chain running hooks in the order given.
func New(hooks []Hook, o Options) (*Chain, error) {
	seen := map[string]bool{}
	for i, h := range hooks {
		switch {
		case h.Name == "" || h.Name == RedactName:
			return nil, fmt.Errorf("%w: hook %d: name %q is empty or reserved", ErrConfig, i, h.Name)
		case h.Before == nil && h.After == nil:
			return nil, fmt.Errorf("%w: hook %q is neither a before nor an after hook", ErrConfig, h.Name)
		case h.Before != nil && seen["before "+h.Name], h.After != nil && seen["after "+h.Name]:
			return nil, fmt.Errorf("%w: hook %q is named twice in one stage", ErrConfig, h.Name)
		}
		seen["before "+h.Name] = seen["before "+h.Name] || h.Before != nil
		seen["after "+h.Name] = seen["after "+h.Name] || h.After != nil
	}
	ch := &Chain{hooks: slices.Clone(hooks), redactor: o.Redactor, log: o.Logger, counts: newCounts()}
	if ch.log == nil {
		ch.log = slog.Default()
	}
	if o.Meter != nil {
		c, err := o.Meter.Int64Counter("toolgate.hook.failures", metric.WithUnit("{failure}"),
			metric.WithDescription("Tool hooks that failed or did not answer in time, by hook, stage and whether they fail open."))
		if err != nil {
			return nil, err
		}
		ch.failures = c
	}
	return ch, nil
}

// Failures is how many times hook name failed (errors, no answer in time,
// answers that are not verdicts) since the chain was made.
func (ch *Chain) Failures(name string) int64 { return ch.counts.get(name) }

// Redact removes the secrets the chain's redaction removes from outputs
// from s, returning the kinds removed; without redaction s comes back.
func (ch *Chain) Redact(s string) (string, []string) {
	if ch == nil || ch.redactor == nil {
		return s, nil
	}
	return ch.redactor.Redact(s)
}

// Empty reports whether the chain does nothing: no hooks, no redaction.
func (ch *Chain) Empty() bool { return ch == nil || (len(ch.hooks) == 0 && ch.redactor == nil) }

func view(c *tools.Call) *Call {
	hc := &Call{ID: c.ID, Agent: c.Agent, SessionID: c.SessionID, Tool: c.Name, Arguments: c.Arguments, Approved: c.Approved}
	if c.Tool != nil {
		hc.Tool = c.Tool.Name
	}
	if len(hc.Arguments) == 0 {
		hc.Arguments = json.RawMessage("{}")
	}
	return hc
}

func (ch *Chain) failed(ctx context.Context, h *Hook, stage string, err error) {
	ch.counts.add(h.Name)
	if ch.failures != nil {
		ch.failures.Add(ctx, 1, metric.WithAttributes(attribute.String("toolgate.hook", h.Name),
			attribute.String("toolgate.hook.stage", stage), attribute.Bool("toolgate.hook.fail_open", h.FailOpen)))
	}
	ch.log.Warn("tool hook failed", "hook", h.Name, "stage", stage, "fail_open", h.FailOpen, "err", err)
}

// hookDenial is the gate-shaped refusal of a call by a hook: the worker
// reports it as any deny (status denied, a policy violation event).
func hookDenial(name, reason string) error {
	return &tools.PolicyError{Decision: policy.Decision{Action: policy.Deny, Reason: reason, Rule: "hook." + name}}
}

// Before is the middleware of the before hooks (tools.WithHooks). Each
// hook that applies to the tool runs in order on the arguments as the
// hooks before it left them; a deny or a failure (unless fail_open) stops
// the call before the gate. It is nil when no hook has a before stage,
// so that the pipeline neither runs it nor validates the arguments again.
func (ch *Chain) Before() tools.Middleware {
	if ch == nil || !slices.ContainsFunc(ch.hooks, func(h Hook) bool { return h.Before != nil }) {
		return nil
	}
	return func(next tools.Handler) tools.Handler {
		return tools.HandlerFunc(func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
			tool := view(c).Tool
			for i := range ch.hooks {
				h := &ch.hooks[i]
				if h.Before == nil || !h.applies(tool) {
					continue
				}
				if err := ch.before(ctx, h, c); err != nil {
					return nil, err
				}
			}
			return next.Handle(ctx, c)
		})
	}
}

func (ch *Chain) before(ctx context.Context, h *Hook, c *tools.Call) error {
	hctx, cancel := context.WithTimeoutCause(ctx, h.timeout(), fmt.Errorf("%w: %s did not answer within %s", ErrHook, h.Name, h.timeout()))
	defer cancel()
	v, err := callBefore(hctx, h, view(c))
	if err == nil {
		err = checkVerdict(&v)
	}
	if err != nil {
		if ctx.Err() != nil {
			// The call itself was cancelled (or the worker stops): not
			// the hook's failure.
			return context.Cause(ctx)
		}
		if cause := context.Cause(hctx); cause != nil {
			err = cause
		}
		ch.failed(ctx, h, events.HookBefore, err)
		if h.FailOpen {
			c.Hooks = append(c.Hooks, tools.HookChange{Hook: h.Name, Stage: events.HookBefore, Note: "failed, passed over (fail_open): " + ch.why(h, err)})
			return nil
		}
		return hookDenial(h.Name, fmt.Sprintf("hook %s failed, the call is refused (fail closed): %s", h.Name, ch.why(h, err)))
	}
	switch v.Action {
	case Deny:
		reason := ch.clean(v.Reason)
		if reason == "" {
			reason = "no reason given"
		}
		return hookDenial(h.Name, fmt.Sprintf("denied by hook %s: %s", h.Name, reason))
	case Modify:
		before, after := argsHash(c.Arguments), argsHash(v.Arguments)
		if before == after {
			return nil
		}
		if c.Approved {
			// People approved the arguments the call was parked with
			// (the hooks had run on them then): never run others.
			return hookDenial(h.Name, fmt.Sprintf("hook %s changed the arguments of a call people approved; they approved the arguments it had, so it is refused", h.Name))
		}
		c.Arguments = v.Arguments
		c.Hooks = append(c.Hooks, tools.HookChange{Hook: h.Name, Stage: events.HookBefore, ArgsSHA256Before: before, ArgsSHA256After: after})
	}
	return nil
}

// callBefore runs the hook, turning a panic into a failure.
func callBefore(ctx context.Context, h *Hook, c *Call) (v Verdict, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s panicked: %v", ErrHook, h.Name, r)
		}
	}()
	return h.Before.Before(ctx, c)
}

func callAfter(ctx context.Context, h *Hook, c *Call, out Output) (s string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s panicked: %v", ErrHook, h.Name, r)
		}
	}()
	return h.After.After(ctx, c, out)
}

// checkVerdict refuses what is not a verdict.
func checkVerdict(v *Verdict) error {
	switch v.Action {
	case Pass, Deny:
		return nil
	case Modify:
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(v.Arguments, &obj); err != nil || obj == nil {
			return fmt.Errorf("%w: modify without a JSON object of arguments", ErrHook)
		}
		return nil
	}
	return fmt.Errorf("%w: action %q is not pass, modify or deny", ErrHook, v.Action)
}

// argsHash is the hex SHA-256 of the canonical JSON of args.
func argsHash(args json.RawMessage) string {
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	if c, err := papproval.Canonical(args); err == nil {
		return sha256Hex([]byte(c))
	}
	return sha256Hex(args)
}

// why is a hook's failure for a reason that already names the hook:
// without the "hook failed: <name>:" the error starts with.
func (ch *Chain) why(h *Hook, err error) string {
	s := strings.TrimPrefix(err.Error(), ErrHook.Error()+": ")
	s = strings.TrimPrefix(s, h.Name+": ")
	return ch.clean(s)
}

// clean redacts text a hook or tool produced that goes into a result.
func (ch *Chain) clean(s string) string {
	if ch.redactor == nil {
		return s
	}
	s, _ = ch.redactor.Redact(s)
	return s
}

// After is the middleware of the after hooks and the redaction
// (tools.WithHooks). The redaction runs first, so that no hook service
// sees a secret, and again last when a hook changed the output; progress
// chunks are redacted as they stream. An after hook that fails (unless
// fail_open) withholds the output: the result is an error naming it.
// It is nil when the chain has nothing to do after a tool (Empty).
func (ch *Chain) After() tools.Middleware {
	if ch.Empty() {
		return nil
	}
	return func(next tools.Handler) tools.Handler {
		return tools.HandlerFunc(func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
			if ch.redactor != nil && c.Progress != nil {
				st := ch.redactor.NewStream(c.Progress)
				c.Progress = st.Write
				defer st.Flush()
			}
			out, err := next.Handle(ctx, c)
			if err != nil && ch.redactor != nil {
				if msg, kinds := ch.redactor.Redact(err.Error()); len(kinds) > 0 {
					err = &redactedError{msg: msg, err: err}
				}
			}
			if out == nil {
				return out, err
			}
			return ch.after(ctx, c, out), err
		})
	}
}

func (ch *Chain) after(ctx context.Context, c *tools.Call, out *tools.Output) *tools.Output {
	out.Content = ch.redact(c, out.Content)
	out.Metadata = ch.redactMeta(out.Metadata)
	changed := false
	hc := view(c)
	if ch.anyAfter(hc.Tool) {
		// What the tool's output bound would keep: a hook service gets a
		// message of bounded size.
		c.Tool.Bound(out)
	}
	content := out.Content
	// Hooks are asked even when the tool's deadline is over: each has its
	// own timeout.
	base := context.WithoutCancel(ctx)
	for i := range ch.hooks {
		h := &ch.hooks[i]
		if h.After == nil || !h.applies(hc.Tool) {
			continue
		}
		hctx, cancel := context.WithTimeoutCause(base, h.timeout(), fmt.Errorf("%w: %s did not answer within %s", ErrHook, h.Name, h.timeout()))
		got, err := callAfter(hctx, h, hc, Output{Content: content, IsError: out.IsError})
		if err != nil {
			if cause := context.Cause(hctx); cause != nil {
				err = cause
			}
		}
		cancel()
		if err != nil {
			ch.failed(ctx, h, events.HookAfter, err)
			if h.FailOpen {
				c.Hooks = append(c.Hooks, tools.HookChange{Hook: h.Name, Stage: events.HookAfter, Note: "failed, passed over (fail_open): " + ch.why(h, err)})
				continue
			}
			msg := fmt.Sprintf("output withheld: after hook %s failed (fail closed): %s", h.Name, ch.why(h, err))
			c.Hooks = append(c.Hooks, tools.HookChange{Hook: h.Name, Stage: events.HookAfter, OutputSHA256: sha256Hex([]byte(msg)), Note: "failed: output withheld"})
			return &tools.Output{Content: msg, IsError: true}
		}
		if got != content {
			content, changed = got, true
			c.Hooks = append(c.Hooks, tools.HookChange{Hook: h.Name, Stage: events.HookAfter, OutputSHA256: sha256Hex([]byte(content))})
		}
	}
	if changed {
		content = ch.redact(c, content)
	}
	out.Content = content
	return out
}

func (ch *Chain) anyAfter(tool string) bool {
	for i := range ch.hooks {
		if ch.hooks[i].After != nil && ch.hooks[i].applies(tool) {
			return true
		}
	}
	return false
}

// redact replaces secrets in s and records it on c when it did.
func (ch *Chain) redact(c *tools.Call, s string) string {
	if ch.redactor == nil {
		return s
	}
	red, kinds := ch.redactor.Redact(s)
	if len(kinds) == 0 {
		return s
	}
	c.Hooks = append(c.Hooks, tools.HookChange{Hook: RedactName, Stage: events.HookAfter, OutputSHA256: sha256Hex([]byte(red)),
		Note: "replaced: " + strings.Join(kinds, ", ")})
	return red
}

// redactMeta redacts the string values of an output's metadata.
func (ch *Chain) redactMeta(m map[string]any) map[string]any {
	if ch.redactor == nil {
		return m
	}
	for k, v := range m {
		if s, ok := v.(string); ok {
			m[k], _ = ch.redactor.Redact(s)
		}
	}
	return m
}

// redactedError is an error whose text had secrets in it: it says the
// redacted text and still unwraps to the original.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// counts are the failures of each hook.
type counts struct {
	mu sync.Mutex
	n  map[string]int64
}

func newCounts() *counts { return &counts{n: map[string]int64{}} }

func (c *counts) add(name string) {
	c.mu.Lock()
	c.n[name]++
	c.mu.Unlock()
}

func (c *counts) get(name string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}
