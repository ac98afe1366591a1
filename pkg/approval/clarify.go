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

// ClarifyRule is the rule id a clarify call's parked decision shows (in
// the approval request and the result); nothing branches on it.
const ClarifyRule = "tools.clarify"

// ClarifyName is the clarify tool's name.
const ClarifyName = "clarify"

// Question is what a clarify call asks a person; it is the tools package's
// Question, which a *tools.Parked carries.
type Question = tools.Question

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

// ClarifyTool returns the clarify tool (seed 004): it asks a person a
// question. It returns a *tools.Parked carrying the question (and a
// decision with the question as reason, rule ClarifyRule, one answer
// needed, the question's timeout), so the worker parks it waiting for an
// answer. When people answer, the resume answers the agent with the answer
// itself; the tool does not run again.
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

func clarify(_ context.Context, c *tools.Call) (*tools.Output, error) {
	q, err := QuestionFrom(c.Args)
	if err != nil {
		return &tools.Output{Content: err.Error(), IsError: true}, nil
	}
	return nil, &tools.Parked{Question: q, Decision: policy.Decision{
		Action: policy.Ask, Rule: ClarifyRule, Reason: q.Text,
		ApprovalTimeout: q.Timeout, Approvers: 1,
	}}
}
