// Package fate decides what becomes of a delivered JetStream message in
// one place. A handler returns a Fate (Ack, Retry after a delay, Term with
// a reason, or Leave it to the owner that holds it); a Runner applies it
// to the message, logs a failed settlement once, and counts every fate.
// Handlers never call Ack, Nak or Term themselves.
package fate

import (
	"fmt"
	"time"
)

// Kind is what becomes of a message.
type Kind uint8

// The kinds of fate. A new kind is added here, with its constructor below
// and its case in Runner.Settle.
const (
	// KindAck: the message is dealt with; it is never delivered again.
	KindAck Kind = iota + 1
	// KindRetry: hand the message back to be delivered again after
	// Fate.After (a negative nak); it spends one of its deliveries.
	KindRetry
	// KindTerm: the message can never succeed (it cannot be read, say);
	// it is never delivered again, and Fate.Reason says why.
	KindTerm
	// KindLeave: do nothing. The message belongs to an owner that is
	// still working on it (a live claim elsewhere) and will settle it, or
	// its ack wait will hand it on.
	KindLeave
)

// String names the kind, as metrics and logs show it.
func (k Kind) String() string {
	switch k {
	case KindAck:
		return "ack"
	case KindRetry:
		return "retry"
	case KindTerm:
		return "term"
	case KindLeave:
		return "leave"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Fate is what a handler decided for the message it was given.
type Fate struct {
	// Kind is what becomes of the message.
	Kind Kind
	// After is how long a retried message waits before it is delivered
	// again.
	After time.Duration
	// Reason says why, for a terminated message (sent to the server with
	// the term) or a message left alone (logged).
	Reason string
	// Err is the failure that made a handler retry, logged with the
	// retry.
	Err error
}

// Ack is the fate of a message that is dealt with.
func Ack() Fate { return Fate{Kind: KindAck} }

// Retry is the fate of a message that failed for now (err says how): it
// is delivered again after the delay.
func Retry(after time.Duration, err error) Fate {
	return Fate{Kind: KindRetry, After: after, Err: err}
}

// Term is the fate of a message that can never succeed.
func Term(reason string) Fate { return Fate{Kind: KindTerm, Reason: reason} }

// Leave is the fate of a message another owner still works on.
func Leave(why string) Fate { return Fate{Kind: KindLeave, Reason: why} }

// String describes the fate for logs.
func (f Fate) String() string {
	switch f.Kind {
	case KindRetry:
		return fmt.Sprintf("retry after %s", f.After)
	case KindTerm, KindLeave:
		if f.Reason != "" {
			return f.Kind.String() + ": " + f.Reason
		}
	}
	return f.Kind.String()
}

// Backoff is the retry delay of a message delivered delivered times: 1s,
// 2s, 4s, ... up to 30s, so that a passing outage does not spend its
// deliveries.
func Backoff(delivered uint64) time.Duration {
	d := time.Second
	for i := uint64(1); i < delivered && d < 30*time.Second; i++ {
		d *= 2
	}
	return min(d, 30*time.Second)
}
