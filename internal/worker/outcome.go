package worker

import (
	"context"
	"errors"
	"time"

	"github.com/toolgate/toolgate/internal/parking"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// outcome maps what the parking step and the pipeline returned to the wire
// result. This is the one place where outcomes (an output, a *tools.Parked,
// an error's kind) become statuses; a new kind of outcome (say, a call
// cancelled by its agent) gets its case here, and its fate follows from
// the status in handle.
func outcome(c *tools.Call, out *tools.Output, err error, shuttingDown bool) events.ResultData {
	r := events.ResultData{CallID: c.ID, Agent: c.Agent, Tool: c.Name, SessionID: c.SessionID}
	if c.Parent != nil { // the task the call served, as its record says
		r.ParentCallID = c.Parent.CallID
	}
	if c.Tool != nil {
		r.Tool = c.Tool.Name
	}
	if out != nil {
		r.Output, r.IsError, r.Metadata, r.Cached = out.Content, out.IsError, out.Metadata, out.Cached
	}
	if c.Decision != nil {
		r.Decision = wireDecision(*c.Decision)
	}
	for _, h := range c.Hooks {
		r.Hooks = append(r.Hooks, events.HookChange(h))
	}
	var (
		pk *tools.Parked
		pe *tools.PolicyError
		ae *tools.ArgumentError
	)
	var be interface {
		Data(callID, worker string) events.BudgetExceededData
	}
	switch {
	case errors.Is(err, tools.ErrCancelled):
		r.Status, r.IsError = events.StatusCancelled, true
		r.Output = appendLine(r.Output, err.Error())
	case errors.Is(err, tools.ErrBudgetExceeded):
		r.Status, r.IsError, r.Error = events.StatusError, true, events.CodeBudgetExceeded
		r.Output = err.Error()
		if errors.As(err, &be) {
			d := be.Data(c.ID, "")
			r.Metadata = map[string]any{"budget": d.Budget, "limit": d.Limit, "max": d.Max, "used": d.Used}
			if d.ResetsAt != nil {
				r.Metadata["resets_at"] = d.ResetsAt.Format(time.RFC3339)
			}
		}
	case err == nil && r.IsError:
		r.Status = events.StatusError
	case err == nil:
		r.Status = events.StatusOK
	case errors.As(err, &pk):
		// Parked by the parking step: waiting for people.
		r.Decision = wireDecision(pk.Decision)
		r.Status, r.IsError, r.Output = events.StatusPending, false, pk.Error()
	case errors.As(err, &pe):
		r.Decision = wireDecision(pe.Decision)
		r.Status, r.IsError, r.Output = events.StatusDenied, true, err.Error()
	case errors.Is(err, parking.ErrTooManyParked):
		r.Status, r.IsError, r.Error, r.Output = events.StatusError, true, events.CodeTooManyParked, err.Error()
	case errors.Is(err, errParkFailed):
		r.Status, r.IsError, r.Error, r.Output = events.StatusError, true, events.CodeInternal, err.Error()
	case errors.As(err, &ae):
		r.Status, r.IsError, r.Error, r.Output = events.StatusError, true, events.CodeInvalidArguments, err.Error()
		r.Metadata = map[string]any{"fields": ae.Fields}
	case errors.Is(err, tools.ErrUnknownTool):
		r.Status, r.IsError, r.Error, r.Output = events.StatusError, true, events.CodeUnknownTool, err.Error()
	case errors.Is(err, tools.ErrTimeout):
		r.Status, r.IsError = events.StatusTimeout, true
		r.Output = appendLine(r.Output, err.Error())
	case errors.Is(err, context.Canceled) && shuttingDown:
		r.Status, r.IsError = events.StatusInterrupted, true
		r.Output = appendLine(r.Output, "interrupted: the worker shut down while the tool ran")
	case errors.Is(err, context.Canceled):
		r.Status, r.IsError = events.StatusCancelled, true
		r.Output = appendLine(r.Output, "cancelled")
	case errors.Is(err, tools.ErrPanic):
		r.Status, r.IsError, r.Error, r.Output = events.StatusError, true, events.CodeInternal, err.Error()
	default:
		r.Status, r.IsError = events.StatusError, true
		r.Output = appendLine(r.Output, err.Error())
	}
	return r
}

func wireDecision(d policy.Decision) *events.Decision {
	return &events.Decision{Action: string(d.Action), Reason: d.Reason, Rule: d.Rule, Offending: d.Offending, Revision: d.Revision}
}

func appendLine(s, line string) string {
	if s == "" {
		return line
	}
	return s + "\n" + line
}
