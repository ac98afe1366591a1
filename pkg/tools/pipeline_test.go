package tools

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/toolgate/toolgate/pkg/policy"
)

// TestStartRunsOnlyForAllowedCallsAndCanStopThem: Start is called once
// the gate allows a call and never for a call refused before it; its error
// stops the call before the tool runs.
func TestStartRunsOnlyForAllowedCallsAndCanStopThem(t *testing.T) {
	reg := NewRegistry()
	var ran int
	reg.MustRegister(&Tool{Name: "t", Kind: policy.KindOther,
		Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"additionalProperties":false}`),
		Handler:    HandlerFunc(func(context.Context, *Call) (*Output, error) { ran++; return &Output{Content: "ran"}, nil })})
	reg.MustRegister(&Tool{Name: "asked", Kind: policy.KindOther, Handler: HandlerFunc(func(context.Context, *Call) (*Output, error) {
		ran++
		return &Output{}, nil
	})})
	reg.MustRegister(&Tool{Name: "denied", Kind: policy.KindOther, Handler: HandlerFunc(func(context.Context, *Call) (*Output, error) {
		ran++
		return &Output{}, nil
	})})
	gate := policy.EvaluatorFunc(func(_ context.Context, r policy.Request) policy.Decision {
		if r.Tool == "asked" {
			return policy.Decision{Action: policy.Ask, Reason: "people", Rule: "r.ask"}
		}
		if r.Tool == "denied" {
			return policy.Decision{Action: policy.Deny, Reason: "no", Rule: "r.deny"}
		}
		return policy.Decision{Action: policy.Allow}
	})
	p := NewPipeline(reg, WithGate(gate))
	taken := errors.New("taken")
	for _, c := range []struct {
		name      string
		call      Call
		startErr  error
		wantErr   error
		starts    int
		toolsRuns int
	}{
		{"allowed", Call{Name: "t", Arguments: json.RawMessage(`{"n":1}`)}, nil, nil, 1, 1},
		{"start refuses", Call{Name: "t", Arguments: json.RawMessage(`{"n":1}`)}, taken, taken, 1, 0},
		{"unknown tool", Call{Name: "nope"}, nil, ErrUnknownTool, 0, 0},
		{"invalid arguments", Call{Name: "t", Arguments: json.RawMessage(`{"n":"x"}`)}, nil, ErrInvalidArguments, 0, 0},
		{"denied", Call{Name: "denied"}, nil, ErrDenied, 0, 0},
		// A judge-only call is claimed (Start) and never run.
		{"judge only allowed", Call{Name: "t", Arguments: json.RawMessage(`{"n":1}`), JudgeOnly: true}, nil, nil, 1, 0},
		{"judge only asked", Call{Name: "asked", JudgeOnly: true}, nil, ErrApprovalRequired, 0, 0},
		{"judge only approved", Call{Name: "asked", JudgeOnly: true, Approved: true}, nil, nil, 1, 0},
		{"judge only denied", Call{Name: "denied", JudgeOnly: true, Approved: true}, nil, ErrDenied, 0, 0},
		{"judge only start refuses", Call{Name: "t", Arguments: json.RawMessage(`{"n":1}`), JudgeOnly: true}, taken, taken, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ran = 0
			starts := 0
			call := c.call
			call.Start = func(context.Context) error { starts++; return c.startErr }
			out, err := p.Handle(context.Background(), &call)
			if call.JudgeOnly && err == nil && (out == nil || out.Metadata["judge_only"] != true) {
				t.Fatalf("judge-only output %+v lacks judge_only", out)
			}
			if (c.wantErr == nil) != (err == nil) || (c.wantErr != nil && !errors.Is(err, c.wantErr)) {
				t.Fatalf("err = %v, want %v", err, c.wantErr)
			}
			if starts != c.starts || ran != c.toolsRuns {
				t.Fatalf("Start called %d times, tool ran %d times; want %d and %d", starts, ran, c.starts, c.toolsRuns)
			}
		})
	}
}
