package approval

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

func TestClarifyNeedsAnAnswer(t *testing.T) {
	reg := tools.NewRegistry()
	reg.MustRegister(ClarifyTool())
	p := tools.NewPipeline(reg)
	call := func(ctx context.Context, args string) (*tools.Output, error) {
		return p.Handle(ctx, &tools.Call{ID: "c1", Agent: "bot", Name: ClarifyName, Arguments: json.RawMessage(args)})
	}
	args := `{"question":"Which branch?","choices":["main","dev"],"timeout":30,"default_answer":"main"}`

	_, err := call(context.Background(), args)
	var pk *tools.Parked
	if !errors.As(err, &pk) || !errors.Is(err, tools.ErrApprovalRequired) || !pk.NeedsAnswer() {
		t.Fatalf("clarify: err = %v, want a *tools.Parked needing an answer", err)
	}
	if pk.Question.Text != "Which branch?" || len(pk.Question.Choices) != 2 || pk.Question.Timeout != 30*time.Second ||
		pk.Question.DefaultAnswer == nil || *pk.Question.DefaultAnswer != "main" {
		t.Fatalf("question = %+v", pk.Question)
	}
	if pk.Decision.Action != policy.Ask || pk.Decision.Rule != ClarifyRule || pk.Decision.Reason != "Which branch?" ||
		pk.Decision.ApprovalTimeout != 30*time.Second || pk.Decision.Approvers != 1 {
		t.Fatalf("decision = %+v", pk.Decision)
	}

	// Bad arguments are refused by the schema before anything parks.
	if _, err := call(context.Background(), `{"question":""}`); !errors.Is(err, tools.ErrInvalidArguments) {
		t.Fatalf("empty question: err = %v", err)
	}
}

func TestQuestionFrom(t *testing.T) {
	tests := []struct {
		name string
		args string
		ok   bool
	}{
		{"question only", `{"question":"why?"}`, true},
		{"choices and default", `{"question":"q","choices":["a","b"],"default_answer":"b"}`, true},
		{"default not a choice", `{"question":"q","choices":["a","b"],"default_answer":"c"}`, false},
		{"fractional timeout", `{"question":"q","timeout":1.5}`, false},
		{"zero timeout", `{"question":"q","timeout":0}`, false},
		{"blank question", `{"question":"  "}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := tools.NewRegistry()
			reg.MustRegister(ClarifyTool())
			args, err := reg.Validate(ClarifyName, json.RawMessage(tt.args))
			if err != nil {
				if tt.ok {
					t.Fatalf("schema: %v", err)
				}
				return
			}
			q, err := QuestionFrom(args)
			if tt.ok != (err == nil) {
				t.Fatalf("QuestionFrom = %+v, %v; want ok=%v", q, err, tt.ok)
			}
		})
	}
	q := &Question{Text: "q", Choices: []string{"a"}}
	if err := q.Accepts("b"); !errors.Is(err, tools.ErrInvalidAnswer) {
		t.Fatalf("Accepts(b) = %v", err)
	}
	if err := q.Accepts("a"); err != nil {
		t.Fatalf("Accepts(a) = %v", err)
	}
}
