package approval

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// ClarifyRule is the rule id of the ask a clarify call parks with.
const ClarifyRule = "tools.clarify"

// ClarifyName is the clarify tool's name.
const ClarifyName = "clarify"

// Question is what a clarify call asks a person.
type Question struct {
	// Text is the question.
	Text string `json:"question"`
	// Choices, when set, are the only answers accepted.
	Choices []string `json:"choices,omitempty"`
	// Timeout is how long the person has; zero means DefaultTimeout. It is
	// not sent: the request's expires_at says it.
	Timeout time.Duration `json:"-"`
	// DefaultAnswer, when set, is the answer on timeout.
	DefaultAnswer *string `json:"default_answer,omitempty"`
}

// Accepts checks an answer against the choices, if any.
func (q *Question) Accepts(answer string) error {
	if answer == "" {
		return fmt.Errorf("%w: answer: empty", ErrInvalidDecision)
	}
	if len(q.Choices) > 0 && !slices.Contains(q.Choices, answer) {
		return fmt.Errorf("%w: answer: %q is not one of %q", ErrInvalidDecision, answer, q.Choices)
	}
	return nil
}

// clarifySchema is the clarify tool's parameters.
const clarifySchema = `{
  "type": "object",
  "properties": {
    "question": {"type": "string", "minLength": 1, "maxLength": 4000, "description": "The question to ask the person."},
    "choices": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 500}, "maxItems": 20, "uniqueItems": true, "description": "The answers to choose from; any text when absent."},
    "timeout": {"type": "integer", "minimum": 1, "maximum": 86400, "description": "Seconds to wait for an answer (default 600)."},
    "default_answer": {"type": "string", "minLength": 1, "maxLength": 4000, "description": "The answer returned when nobody answers in time."}
  },
  "required": ["question"],
  "additionalProperties": false
}`

// QuestionFrom reads a clarify call's decoded, schema-valid arguments.
func QuestionFrom(args map[string]any) (*Question, error) {
	q := &Question{}
	q.Text, _ = args["question"].(string)
	if strings.TrimSpace(q.Text) == "" {
		return nil, fmt.Errorf("clarify: question: empty")
	}
	if cs, ok := args["choices"].([]any); ok {
		for i, c := range cs {
			s, ok := c.(string)
			if !ok || s == "" {
				return nil, fmt.Errorf("clarify: choices[%d]: not a non-empty string", i)
			}
			q.Choices = append(q.Choices, s)
		}
	}
	if t, ok := args["timeout"]; ok {
		var secs int64
		switch v := t.(type) {
		case json.Number:
			n, err := v.Int64()
			if err != nil {
				return nil, fmt.Errorf("clarify: timeout: %q is not a whole number of seconds", v)
			}
			secs = n
		case float64:
			secs = int64(v)
		default:
			return nil, fmt.Errorf("clarify: timeout: %v is not a number", t)
		}
		if secs < 1 || secs > 86400 {
			return nil, fmt.Errorf("clarify: timeout: %d is not between 1 and 86400 seconds", secs)
		}
		q.Timeout = time.Duration(secs) * time.Second
	}
	if d, ok := args["default_answer"].(string); ok {
		if len(q.Choices) > 0 && !slices.Contains(q.Choices, d) {
			return nil, fmt.Errorf("clarify: default_answer: %q is not one of the choices", d)
		}
		q.DefaultAnswer = &d
	}
	return q, nil
}

// ClarifyAnswer is how a resumed clarify call learns its answer.
type ClarifyAnswer struct {
	// Answer is the person's answer, or the default answer.
	Answer string
	// By lists who answered; empty when the default was used.
	By []string
	// Default is true when nobody answered in time and the default answer
	// was used.
	Default bool
}

type answerKey struct{}

// WithAnswer returns ctx carrying the answer to a parked clarify call; the
// worker resumes the call with it.
func WithAnswer(ctx context.Context, a ClarifyAnswer) context.Context {
	return context.WithValue(ctx, answerKey{}, a)
}

// AnswerFrom returns the answer WithAnswer put in ctx.
func AnswerFrom(ctx context.Context) (ClarifyAnswer, bool) {
	a, ok := ctx.Value(answerKey{}).(ClarifyAnswer)
	return a, ok
}

// ClarifyTool returns the clarify tool (seed 004): it asks a person a
// question and returns the answer. Without an answer in its context it
// returns a *tools.PolicyError asking (rule tools.clarify, the question as
// reason, the question's timeout as approval timeout), so the worker parks
// it like an approval; the worker resumes it with WithAnswer.
func ClarifyTool() *tools.Tool {
	return &tools.Tool{
		Name:        ClarifyName,
		Description: "Ask the person supervising you a question and wait for the answer. Use it when the task is ambiguous; offer choices when you can.",
		Parameters:  json.RawMessage(clarifySchema),
		Kind:        policy.KindOther,
		Category:    "builtin",
		Annotations: tools.Annotations{ReadOnly: true, Idempotent: true},
		Handler:     tools.HandlerFunc(clarify),
	}
}

func clarify(ctx context.Context, c *tools.Call) (*tools.Output, error) {
	q, err := QuestionFrom(c.Args)
	if err != nil {
		return &tools.Output{Content: err.Error(), IsError: true}, nil
	}
	a, ok := AnswerFrom(ctx)
	if !ok {
		return nil, &tools.PolicyError{Decision: policy.Decision{
			Action: policy.Ask, Rule: ClarifyRule, Reason: q.Text,
			ApprovalTimeout: q.Timeout, Approvers: 1,
		}}
	}
	md := map[string]any{"default_answer_used": a.Default}
	if len(a.By) > 0 {
		md["answered_by"] = a.By
	}
	return &tools.Output{Content: a.Answer, Metadata: md}, nil
}
