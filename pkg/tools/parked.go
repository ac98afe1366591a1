package tools

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/toolgate/toolgate/pkg/policy"
)

// ErrInvalidAnswer: an answer a question does not accept.
var ErrInvalidAnswer = errors.New("invalid answer")

// Parked is the outcome of a call that waits for people instead of ending:
// the gate asked about it (an approval is needed), or the tool asks a
// person a question (an answer is needed). It is not a failure.
//
// A Parked travels up the pipeline as the error of Handler.Handle, so
// that every middleware passes it on untouched and one that does not know
// it treats the call as not done, never as a success; errors.Is(err,
// ErrApprovalRequired) holds for it. The runner's parking step (the
// worker's) records the call and answers the agent "pending"; the call
// resumes when people decide.
type Parked struct {
	// Decision is the gate's ask: rule, reason, the approvals it needs,
	// how long people have. For a question: the question as reason, one
	// answer needed, the question's timeout.
	Decision policy.Decision
	// Question, when set, is what the tool asks: the call waits for an
	// answer, not an approval.
	Question *Question
}

// NeedsAnswer reports whether the call waits for an answer to a question
// rather than for an approval.
func (p *Parked) NeedsAnswer() bool { return p.Question != nil }

// Error says what the call waits for, for a person.
func (p *Parked) Error() string {
	if p.NeedsAnswer() {
		return "waiting for an answer: " + p.Question.Text
	}
	return "waiting for approval: " + p.Decision.Reason // the rule travels in the decision
}

// Unwrap makes errors.Is(err, ErrApprovalRequired) true.
func (p *Parked) Unwrap() error { return ErrApprovalRequired }

// Question is what a tool asks a person (the clarify tool's question).
type Question struct {
	// Text is the question.
	Text string `json:"question"`
	// Choices, when set, are the only answers accepted.
	Choices []string `json:"choices,omitempty"`
	// Timeout is how long the person has; zero means the default. It is
	// not sent: the request's expires_at says it.
	Timeout time.Duration `json:"-"`
	// DefaultAnswer, when set, is the answer on timeout.
	DefaultAnswer *string `json:"default_answer,omitempty"`
}

// Accepts checks an answer against the choices, if any; a refusal wraps
// ErrInvalidAnswer.
func (q *Question) Accepts(answer string) error {
	if answer == "" {
		return fmt.Errorf("%w: answer: empty", ErrInvalidAnswer)
	}
	if len(q.Choices) > 0 && !slices.Contains(q.Choices, answer) {
		return fmt.Errorf("%w: answer: %q is not one of %q", ErrInvalidAnswer, answer, q.Choices)
	}
	return nil
}
