package tools

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/pkg/policy"
)

// TestWithHooksPlaces: the before middleware runs before the gate and
// what it changes is validated again and judged; the after middleware
// sees the tool's whole output, before the bound cuts it.
func TestWithHooksPlaces(t *testing.T) {
	reg := NewRegistry()
	reg.MustRegister(&Tool{Name: "t", Kind: policy.KindOther, MaxOutput: 10,
		Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","maximum":5}},"additionalProperties":false}`),
		Handler: HandlerFunc(func(context.Context, *Call) (*Output, error) {
			return &Output{Content: strings.Repeat("x", 100)}, nil
		})})
	var judged []any
	gate := policy.EvaluatorFunc(func(_ context.Context, r policy.Request) policy.Decision {
		judged = append(judged, r.Arguments["n"])
		if n, _ := r.Arguments["n"].(json.Number).Int64(); n == 4 {
			return policy.Decision{Action: policy.Deny, Reason: "no fours"}
		}
		return policy.Decision{Action: policy.Allow}
	})
	setN := func(raw string) Middleware {
		return func(next Handler) Handler {
			return HandlerFunc(func(ctx context.Context, c *Call) (*Output, error) {
				c.Arguments = json.RawMessage(raw)
				return next.Handle(ctx, c)
			})
		}
	}
	var seen int
	after := func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, c *Call) (*Output, error) {
			out, err := next.Handle(ctx, c)
			seen = len(out.Content)
			return out, err
		})
	}
	for _, c := range []struct {
		name, set string
		want      error
	}{
		{"allowed as changed", `{"n":3}`, nil},
		{"denied as changed", `{"n":4}`, ErrDenied},
		{"invalid as changed", `{"n":9}`, ErrInvalidArguments},
	} {
		t.Run(c.name, func(t *testing.T) {
			judged, seen = nil, 0
			p := NewPipeline(reg, WithGate(gate), WithHooks(setN(c.set), after))
			out, err := p.Handle(context.Background(), &Call{Name: "t", Arguments: json.RawMessage(`{"n":1}`)})
			if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if c.want == ErrInvalidArguments {
				if len(judged) != 0 || !strings.Contains(err.Error(), "as hooks changed them") {
					t.Fatalf("judged %v, err %v", judged, err)
				}
				return
			}
			if len(judged) != 1 || judged[0].(json.Number).String() != c.set[5:6] {
				t.Fatalf("the gate judged %v, want only the changed arguments", judged)
			}
			if c.want == nil && (seen != 100 || out.Metadata["truncated"] != true) {
				t.Fatalf("after saw %d characters; result %+v", seen, out)
			}
		})
	}
}
