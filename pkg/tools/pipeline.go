package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"time"

	"github.com/toolgate/toolgate/pkg/policy"
)

// Pipeline runs calls through the fixed order of steps every call takes:
//
//	Recover → Resolve → Validate → [before hooks → Validate again] → Gate → Start → Bound → [after hooks] → Timeout → tool
//
// A step ends a call early by returning an error: a *PolicyError (denied),
// an *ArgumentError, or a *Parked (the gate asks people first; a tool such
// as clarify may return one too), which the runner parks.
//
// Extra middleware (budgets) goes between Gate and Bound through Use; tool
// hooks go where WithHooks puts them. Bound is outside the after hooks so
// that they (the redaction of secrets above all) see the whole output, not
// one cut in the middle of a secret. The zero value is not usable; use
// NewPipeline.
type Pipeline struct {
	reg       *Registry
	gate      policy.Evaluator
	workspace string
	log       *slog.Logger
	extra     []Middleware
	before    Middleware // before hooks: may change the arguments
	after     Middleware // after hooks: may change the output
	handler   Handler    // the composed chain, built once
}

// PipelineOption configures a Pipeline.
type PipelineOption func(*Pipeline)

// WithGate sets the policy evaluator; the default allows every call.
func WithGate(g policy.Evaluator) PipelineOption { return func(p *Pipeline) { p.gate = g } }

// WithWorkspace sets the workspace root handed to the gate.
func WithWorkspace(dir string) PipelineOption { return func(p *Pipeline) { p.workspace = dir } }

// WithLogger sets the logger for recovered panics.
func WithLogger(l *slog.Logger) PipelineOption { return func(p *Pipeline) { p.log = l } }

// Use adds middleware that runs after the gate (and Start) and before
// Bound, the after hooks and the timeout.
func Use(mws ...Middleware) PipelineOption {
	return func(p *Pipeline) { p.extra = append(p.extra, mws...) }
}

// WithHooks sets the tool hooks (pkg/hooks). before runs once the
// arguments are validated and before the gate judges them; arguments it
// changes (Call.Arguments) are validated again, so the gate only ever
// judges, and the tool only ever runs, arguments that satisfy the schema
// as they will run. after wraps the tool (inside Bound, outside Timeout):
// it sees the tool's whole output and may change it. Either may be nil.
func WithHooks(before, after Middleware) PipelineOption {
	return func(p *Pipeline) { p.before, p.after = before, after }
}

// NewPipeline returns a pipeline over reg.
func NewPipeline(reg *Registry, opts ...PipelineOption) *Pipeline {
	p := &Pipeline{reg: reg, gate: policy.AllowAll, log: slog.Default()}
	for _, o := range opts {
		o(p)
	}
	p.handler = p.compose()
	return p
}

// Registry returns the pipeline's registry.
func (p *Pipeline) Registry() *Registry { return p.reg }

// Handler returns the composed handler.
func (p *Pipeline) Handler() Handler { return p.handler }

func (p *Pipeline) compose() Handler {
	mws := []Middleware{p.recover, p.resolve, p.validate}
	if p.before != nil {
		mws = append(mws, p.before, p.revalidate)
	}
	mws = append(mws, p.policy)
	mws = append(mws, p.extra...)
	mws = append(mws, bound)
	if p.after != nil {
		mws = append(mws, p.after)
	}
	mws = append(mws, timeout)
	return Chain(HandlerFunc(execute), mws...)
}

// Handle runs one call through the pipeline.
func (p *Pipeline) Handle(ctx context.Context, c *Call) (*Output, error) {
	return p.handler.Handle(ctx, c)
}

func (p *Pipeline) recover(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, c *Call) (out *Output, err error) {
		defer func() {
			if r := recover(); r != nil {
				p.log.Error("tool panicked", "call_id", c.ID, "tool", c.Name, "panic", r, "stack", string(debug.Stack()))
				out, err = nil, fmt.Errorf("%w: %v", ErrPanic, r)
			}
		}()
		return next.Handle(ctx, c)
	})
}

func (p *Pipeline) resolve(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, c *Call) (*Output, error) {
		e, ok := p.reg.get(c.Name)
		if !ok {
			return nil, &UnknownToolError{Name: c.Name, Available: p.reg.Names()}
		}
		c.Tool = e.tool
		return next.Handle(ctx, c)
	})
}

func (p *Pipeline) validate(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, c *Call) (*Output, error) {
		if err := p.check(c); err != nil {
			return nil, err
		}
		return next.Handle(ctx, c)
	})
}

// revalidate validates again arguments the before hooks changed.
func (p *Pipeline) revalidate(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, c *Call) (*Output, error) {
		if !bytes.Equal(c.Arguments, c.validated) {
			if err := p.check(c); err != nil {
				return nil, fmt.Errorf("the arguments as hooks changed them: %w", err)
			}
		}
		return next.Handle(ctx, c)
	})
}

// check validates the resolved call's arguments against its tool's
// schema and sets Args from them.
func (p *Pipeline) check(c *Call) error {
	e, ok := p.reg.get(c.Tool.Name)
	if !ok {
		return &UnknownToolError{Name: c.Name, Available: p.reg.Names()}
	}
	args, err := validate(e, c.Arguments)
	if err != nil {
		return err
	}
	c.Args, c.validated = args, c.Arguments
	return nil
}

func (p *Pipeline) policy(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, c *Call) (*Output, error) {
		d := p.Decide(ctx, c)
		c.Decision = &d
		recordDecision(ctx, d)
		switch {
		case d.Action == policy.Allow:
		case d.Action == policy.Ask && c.Approved && c.Approvals > 0 && c.Approvals < d.Approvers:
			// The policy in force now asks for more people than approved;
			// c.Decision keeps what the gate said (ask).
			deny := d
			deny.Action = policy.Deny
			deny.Reason = fmt.Sprintf("%s (the policy now needs %d approvals, the call had %d)", d.Reason, d.Approvers, c.Approvals)
			return nil, &PolicyError{Decision: deny}
		case d.Action == policy.Ask && c.Approved:
		case d.Action == policy.Ask:
			// Not yet approved: the call waits for people.
			return nil, &Parked{Decision: d}
		default: // deny, or anything unknown
			return nil, &PolicyError{Decision: d}
		}
		if pc, ok := p.gate.(policy.PathChecker); ok {
			req := p.request(c)
			rv, revisioned := p.gate.(policy.Revisioned)
			c.CheckPath = func(realPath string) error {
				if revisioned && d.Action == policy.Allow && slices.Contains(d.Paths, realPath) && rv.Revision() == d.Revision {
					return nil // the gate allowed this very path a moment ago
				}
				pd := pc.CheckPath(req, realPath)
				if pd.Action == policy.Allow || (pd.Action == policy.Ask && c.Approved) {
					return nil
				}
				// A path the gate would only ask about was not what the
				// call named: without an approval for it, refuse.
				pd.Action = policy.Deny
				return &PolicyError{Decision: pd}
			}
		}
		if d.Timeout > 0 && (c.Timeout == 0 || d.Timeout < c.Timeout) {
			c.Timeout = d.Timeout
		}
		if c.Start != nil {
			if err := c.Start(ctx); err != nil {
				return nil, err
			}
		}
		if c.JudgeOnly {
			return judged(c, d), nil
		}
		return next.Handle(ctx, c)
	})
}

// judged is the answer to a judge-only call the gate allowed (or people
// approved): it may run, and nothing ran it.
func judged(c *Call, d policy.Decision) *Output {
	how := "allowed by the policy"
	if c.Approved {
		how = "approved by people"
	}
	msg := fmt.Sprintf("%s: %s; judged only, not executed", how, c.Tool.Name)
	if d.Reason != "" {
		msg += " (" + d.Reason + ")"
	}
	return &Output{Content: msg, Metadata: map[string]any{"judge_only": true, "approved": c.Approved}}
}

// Decide asks the gate about a resolved, validated call. A panic in the
// gate is a deny: evaluation errors fail closed.
func (p *Pipeline) Decide(ctx context.Context, c *Call) (d policy.Decision) {
	defer func() {
		if r := recover(); r != nil {
			d = policy.Decision{Action: policy.Deny, Reason: fmt.Sprintf("policy evaluation failed: %v", r), Rule: "builtin.fail_closed"}
		}
	}()
	return p.gate.Evaluate(ctx, p.request(c))
}

func (p *Pipeline) request(c *Call) policy.Request {
	req := policy.Request{Agent: c.Agent, Tool: c.Name, Known: c.Tool != nil, Arguments: c.Args, Workspace: p.workspace}
	if c.Tool != nil {
		req.Tool, req.Kind = c.Tool.Name, c.Tool.Kind
	}
	return req
}

// timeoutGrace is how long past its own timeout a tool that enforces one
// has to return before the pipeline's backstop cancels it.
const timeoutGrace = 2 * time.Second

// timeout bounds the call by the tool's default, the caller's request, or
// the gate's override, whichever is smallest, never above the tool's
// maximum.
func timeout(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, c *Call) (*Output, error) {
		d := c.Tool.timeout()
		// A tool with a timeout argument enforces its timeout itself (and
		// says so best); the pipeline's deadline is then a backstop.
		own := c.Tool.TimeoutArgument != ""
		if ms, ok := argMillis(c.Args, c.Tool.TimeoutArgument); ok && ms > 0 {
			d = min(time.Duration(ms)*time.Millisecond, c.Tool.maxTimeout())
		}
		if c.Timeout > 0 && c.Timeout < d {
			// The caller's (or the gate's) bound only ever shortens, and
			// the tool does not know it: the pipeline enforces it.
			d, own = min(c.Timeout, c.Tool.maxTimeout()), false
		}
		deadline := d
		if own {
			deadline += timeoutGrace
		}
		cause := &timeoutError{after: d}
		ctx, cancel := context.WithTimeoutCause(ctx, deadline, cause)
		defer cancel()
		out, err := next.Handle(ctx, c)
		if errors.Is(err, ErrTimeout) {
			return out, err // the tool said so itself, with its detail
		}
		if context.Cause(ctx) == error(cause) {
			// Whatever the tool returned, it was cut short: keep its partial
			// output and report the timeout.
			if err != nil {
				return out, fmt.Errorf("%w: %w", cause, err)
			}
			return out, cause
		}
		return out, err
	})
}

// timeoutError is a call's timeout: ErrTimeout "after" its duration,
// the message made only when read (most calls never time out).
type timeoutError struct{ after time.Duration }

func (e *timeoutError) Error() string { return ErrTimeout.Error() + " after " + e.after.String() }

// Unwrap makes errors.Is(err, ErrTimeout) true.
func (e *timeoutError) Unwrap() error { return ErrTimeout }

// bound cuts an output above the tool's MaxOutput (head and tail kept).
func bound(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, c *Call) (*Output, error) {
		out, err := next.Handle(ctx, c)
		if out != nil {
			c.Tool.Bound(out)
		}
		return out, err
	})
}

// argMillis reads an integer argument (json.Number after validation).
func argMillis(args map[string]any, name string) (int64, bool) {
	if name == "" {
		return 0, false
	}
	switch v := args[name].(type) {
	case json.Number:
		n, err := v.Int64()
		return n, err == nil
	case float64:
		return int64(v), true
	}
	return 0, false
}

func execute(ctx context.Context, c *Call) (*Output, error) {
	out, err := c.Tool.Handler.Handle(ctx, c)
	if err != nil {
		return out, err
	}
	if out == nil {
		out = &Output{}
	}
	return out, nil
}

// Elapsed is a helper for runners: milliseconds since start, at least 0.
func Elapsed(start time.Time) int64 { return max(time.Since(start).Milliseconds(), 0) }

// IsPipelineError reports whether err is one of the pipeline's own
// conditions (as opposed to an unexpected failure).
func IsPipelineError(err error) bool {
	for _, e := range []error{ErrUnknownTool, ErrInvalidArguments, ErrDenied, ErrApprovalRequired, ErrTimeout, ErrPanic, ErrCancelled, ErrBudgetExceeded} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
