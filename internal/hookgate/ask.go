package hookgate

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// BusAsker asks people through the approver: a clarify call on the bus
// with the choices allow and deny (deny when nobody answers in time), made
// as the client's agent.
type BusAsker struct {
	Client *client.Client
	// OnParked, if set, is told the clarify call's id once it waits.
	OnParked func(callID string)
}

var _ Asker = BusAsker{}

// Ask implements Asker.
func (a BusAsker) Ask(ctx context.Context, question string, timeout time.Duration) (bool, string, error) {
	secs := max(int64(timeout/time.Second), 1)
	args := map[string]any{"question": question, "choices": []string{"allow", "deny"},
		"timeout": secs, "default_answer": "deny"}
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	res, err := a.Client.Call(ctx, "clarify", args, client.OnPending(func(r events.ResultData) {
		if a.OnParked != nil {
			a.OnParked(r.CallID)
		}
	}))
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
