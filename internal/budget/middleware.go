package budget

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools"
)

// Middleware charges every call that reaches it (after the gate allowed
// it and its claim is made, so a redelivered call is never charged
// twice), bounds its timeout by the execution time left, and releases it
// when it ends. A spent budget refuses the call with an *ExceededError
// and publishes a dev.toolgate.budget.exceeded.v1 event; a counter that
// cannot be read or written refuses it too (fail closed). A call made
// for a delegated task (tools.Call.Parent, set by internal/delegate's
// middleware, which must come first) is charged to the delegating
// agent's and session's budgets.
func (e *Enforcer) Middleware() tools.Middleware {
	return func(next tools.Handler) tools.Handler {
		return tools.HandlerFunc(func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
			ch, err := e.Charge(ctx, useOf(c))
			var ex *ExceededError
			if errors.As(err, &ex) {
				e.exceeded(c, ex)
				return nil, err
			}
			if err != nil {
				return nil, fmt.Errorf("budgets could not be checked, so the call does not run: %w", err)
			}
			if len(ch.keys) > 0 { // no budget applies: nothing to release
				defer func() {
					rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
					defer cancel()
					ch.Release(rctx)
				}()
			}
			if ch.Remaining > 0 && (c.Timeout == 0 || ch.Remaining < c.Timeout) {
				c.Timeout = max(ch.Remaining, time.Millisecond)
			}
			return next.Handle(ctx, c)
		})
	}
}

// useOf is what call c is charged as.
func useOf(c *tools.Call) Use {
	u := Use{CallID: c.ID, Agent: c.Agent, Session: c.SessionID, Tool: c.Name}
	if c.Tool != nil {
		u.Tool = c.Tool.Name
	}
	if p := c.Parent; p != nil && p.BudgetAgent != "" {
		// A delegated task's call counts against the budget of whoever
		// delegated first (the task record says who, not the call).
		u.Agent, u.Session = p.BudgetAgent, p.BudgetSession
	}
	return u
}

// Applies reports whether a budget of the policy in force applies to
// call c. The worker claims such a call even when its tool is pure, so
// that its id is charged and run once (see Charge).
func (e *Enforcer) Applies(c *tools.Call) bool {
	u := useOf(c)
	budgets := e.cfg.Budgets()
	if c.ParentCallID != "" && c.Parent == nil && len(budgets) > 0 {
		return true // whose budget a task's call counts against is not known yet
	}
	for _, b := range budgets {
		if b.Applies(u.Agent, u.Tool) {
			return true
		}
	}
	return false
}

func (e *Enforcer) exceeded(c *tools.Call, ex *ExceededError) {
	e.log.Info("budget exceeded", "call_id", c.ID, "agent", c.Agent, "session", c.SessionID, "budget", ex.Budget.Name, "limit", ex.Limit)
	key := strings.ReplaceAll(c.Agent+"."+c.ID, " ", "_")
	m, err := events.NewMessage(events.BudgetSubject(c.Agent), key+":budget", e.source, events.TypeBudgetExceeded, ex.Data(c.ID, e.cfg.Worker))
	if err != nil {
		e.log.Error("encode budget event", "err", err)
		return
	}
	if _, err := e.js.PublishMsgAsync(m); err != nil {
		e.log.Warn("publish budget event", "call_id", c.ID, "err", err)
	}
}
