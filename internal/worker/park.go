package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/toolgate/toolgate/internal/parking"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// Parker parks a call that waits for people (the policy gate asked about
// it, or its tool asks a question) until they decide.
type Parker interface {
	// Park records the call with what it waits for and publishes an
	// approval request. The worker then publishes a pending result and
	// acks the call message; the call resumes when people decide.
	Park(ctx context.Context, in *events.Call, c *tools.Call, pk *tools.Parked) error
}

// errParkFailed marks a call that waits for people but could not be
// parked: it ends with an internal error (outcome.go).
var errParkFailed = errors.New("could not park the call for approval")

// errNoOneToAsk ends a call that asks a person a question on a worker
// with no approvals configured: an error result, not a policy violation.
var errNoOneToAsk = errors.New("nobody to ask")

// park is the parking step, the layer around the pipeline: a call the
// pipeline ends with a *tools.Parked is parked with the Parker, and the
// same *tools.Parked comes out, meaning "parked, waiting" (outcome maps it
// to a pending result). A worker with no Parker refuses the call (denied);
// a failed park ends it with errParkFailed. Everything else passes
// through.
func (w *Worker) park(in *events.Call, next tools.Handler) tools.Handler {
	return tools.HandlerFunc(func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
		out, err := next.Handle(ctx, c)
		var pk *tools.Parked
		if !errors.As(err, &pk) {
			return out, err
		}
		if w.cfg.Parker == nil && pk.NeedsAnswer() {
			// A question broke no rule: no violation, just nobody to ask.
			return nil, fmt.Errorf("%w: a person must answer %q, but this worker has no approvals configured", errNoOneToAsk, pk.Question.Text)
		}
		if w.cfg.Parker == nil {
			d := pk.Decision
			d.Action = policy.Deny
			d.Reason = "approval required, but this worker has no approvals configured: " + d.Reason
			return nil, &tools.PolicyError{Decision: d}
		}
		if perr := w.cfg.Parker.Park(ctx, in, c, pk); perr != nil {
			if errors.Is(perr, parking.ErrTooManyParked) {
				w.log.Warn("call not parked", "call_id", in.ID, "agent", in.Agent, "err", perr)
				return nil, perr // outcome: an error result saying why
			}
			w.log.Error("park failed", "call_id", in.ID, "err", perr)
			return nil, fmt.Errorf("%w: %w", errParkFailed, perr)
		}
		w.cx.afterPark(ctx, in) // a cancellation that came while it was parked
		return nil, pk
	})
}

// ManagerParker parks calls with an approvals manager.
type ManagerParker struct {
	M *parking.Manager
	// Preview, if set, shows what a call would change (the diff of a
	// write or edit against the file as it is now); empty keeps the
	// preview computed from the arguments alone.
	Preview func(c *tools.Call) string
}

// Park records the call with what it waits for (the gate's ask, or the
// tool's question) and the content mode to answer in, and publishes the
// approval request.
func (mp ManagerParker) Park(ctx context.Context, in *events.Call, c *tools.Call, pk *tools.Parked) error {
	p, err := parking.NewParked(c, pk)
	if err != nil {
		return err
	}
	if mp.Preview != nil && !p.IsClarify() {
		if diff := mp.Preview(c); diff != "" {
			p.Diff = diff
		}
	}
	p.Meta = map[string]string{"mode": in.Mode.String()}
	if in.Data.JudgeOnly {
		p.Meta["judge_only"] = "true" // the resume answers it without running the tool
	}
	if in.TraceParent != "" {
		p.Meta["traceparent"] = in.TraceParent
	}
	if in.TraceState != "" {
		p.Meta["tracestate"] = in.TraceState
	}
	if tp := telemetry.TraceParentOf(ctx); tp != "" {
		p.Meta[telemetry.MetaSpan] = tp // the approver's decision and the resume continue here
	}
	return mp.M.Park(ctx, p)
}
