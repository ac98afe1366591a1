package hookgate

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tooldef"
)

// BusAsker asks people through the approver. A request for one of
// toolgate's own tools is published as a judge-only call of that tool: the
// worker validates and judges it again and parks it for a real approval
// (signed decision bound to the arguments, thresholds, expiry, audit), and
// answers it without running the tool. Other requests (the agent's MCP
// tools, web tools) become a clarify question with the choices allow and
// deny (deny when nobody answers in time). Calls are made as the client's
// agent.
type BusAsker struct {
	Client *client.Client
	// OnParked, if set, is told the call's id once it waits.
	OnParked func(callID string)
}

var _ Asker = BusAsker{}

// judgeable reports whether a judge-only call can stand for r: r names a
// built-in tool (by its own name) and carries every argument the tool
// requires.
func judgeable(r policy.Request) bool {
	d, ok := tooldef.Lookup(r.Tool)
	if !ok || d.Name != r.Tool {
		return false
	}
	for _, n := range d.Required() {
		if _, has := r.Arguments[n]; !has {
			return false
		}
	}
	return true
}

// Ask implements Asker: every request must be approved; the first one
// that is not decides.
func (a BusAsker) Ask(ctx context.Context, reqs []policy.Request, question string, timeout time.Duration) (bool, string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	if len(reqs) == 0 { // nothing to approve by name: never allow by default
		return a.clarify(ctx, question, timeout)
	}
	for _, r := range reqs {
		if !judgeable(r) {
			return a.clarify(ctx, question, timeout)
		}
	}
	var who []string
	for _, r := range reqs {
		res, err := a.Client.Call(ctx, r.Tool, r.Arguments, client.JudgeOnly(), a.onPending())
		if err != nil {
			return false, "", err
		}
		if res.Status != events.StatusOK {
			return false, fmt.Sprintf("%s %s: %s", r.Tool, res.Status, res.Output), nil
		}
		if j, _ := res.Metadata["judge_only"].(bool); !j {
			// Not a worker that judges only: never answer allow for a call
			// something else may have run.
			return false, "the worker did not judge the call only", nil
		}
		if res.Decision != nil {
			who = append(who, res.Decision.Approvers...)
		}
	}
	if len(who) == 0 {
		return true, "the policy on the bus", nil
	}
	return true, strings.Join(who, ", "), nil
}

func (a BusAsker) onPending() client.CallOption {
	return client.OnPending(func(r events.ResultData) {
		if a.OnParked != nil {
			a.OnParked(r.CallID)
		}
	})
}

// clarify asks question with the choices allow and deny.
func (a BusAsker) clarify(ctx context.Context, question string, timeout time.Duration) (bool, string, error) {
	secs := max(int64(timeout/time.Second), 1)
	args := map[string]any{"question": question, "choices": []string{"allow", "deny"},
		"timeout": secs, "default_answer": "deny"}
	res, err := a.Client.Call(ctx, "clarify", args, a.onPending())
	if err != nil {
		return false, "", err
	}
	if res.Status != events.StatusOK {
		return false, fmt.Sprintf("the question was %s: %s", res.Status, res.Output), nil
	}
	who := "a person"
	if by, ok := res.Metadata["answered_by"].([]any); ok && len(by) > 0 {
		var names []string
		for _, b := range by {
			names = append(names, fmt.Sprint(b))
		}
		who = strings.Join(names, ", ")
	}
	if used, _ := res.Metadata["default_answer_used"].(bool); used {
		return false, "nobody answered in time", nil
	}
	if strings.TrimSpace(res.Output) == "allow" {
		return true, who, nil
	}
	return false, who + " answered " + res.Output, nil
}
