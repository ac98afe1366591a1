package fate

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Settler is a delivered message as a Runner settles it: the verbs of
// jetstream.Msg (and of a pulled nats.Msg) that decide its fate.
type Settler interface {
	Ack() error
	NakWithDelay(delay time.Duration) error
	TermWithReason(reason string) error
}

// Message is what a Handler reads of a delivered message. It has no way
// to settle the message: the handler's Fate does that.
type Message interface {
	Subject() string
	Headers() nats.Header
	Data() []byte
}

// Handler handles one delivered message and says what becomes of it.
type Handler func(ctx context.Context, m Message) Fate

// Runner applies the fates a consumer's handler returns. It is the only
// code of its consumer that acks, naks or terms a message. The zero value
// logs to slog.Default and counts nothing.
type Runner struct {
	// Consumer names the consumer in logs and counts.
	Consumer string
	// Logger receives a failed settlement, once per message.
	Logger *slog.Logger
	// KeepAlive, when positive, is how often Run marks a message in
	// progress while its handler runs, so that a long run does not
	// outlive the consumer's ack wait.
	KeepAlive time.Duration
	// Count, when set, is told every fate applied (metrics).
	Count func(consumer string, f Fate)
}

// Settle applies f to m. A message settled twice (a late ack) or whose
// settlement fails is logged and its error returned; the server then
// delivers it again after its ack wait, which every handler tolerates.
func (r *Runner) Settle(m Settler, f Fate) error {
	var err error
	switch f.Kind {
	case KindAck:
		err = m.Ack()
	case KindRetry:
		err = m.NakWithDelay(max(f.After, 0))
	case KindTerm:
		err = m.TermWithReason(f.Reason)
	case KindLeave:
	default:
		// An unknown fate fails safe: the message comes back.
		err = m.NakWithDelay(time.Second)
	}
	log := r.logger()
	switch {
	case err != nil && !errors.Is(err, nats.ErrMsgAlreadyAckd) && !errors.Is(err, jetstream.ErrMsgAlreadyAckd):
		log.Warn("settle message", "consumer", r.Consumer, "fate", f.String(), "err", err)
	case f.Kind == KindRetry && f.Err != nil:
		log.Warn("message handed back", "consumer", r.Consumer, "fate", f.String(), "err", f.Err)
	}
	if r.Count != nil {
		r.Count(r.Consumer, f)
	}
	return err
}

// Run handles m with h, keeping m in progress while h runs when KeepAlive
// is set, and applies the fate h returns.
func (r *Runner) Run(ctx context.Context, m jetstream.Msg, h Handler) {
	stop := r.keepAlive(m)
	f := h(ctx, m)
	stop()
	_ = r.Settle(m, f)
}

// Consume returns a jetstream.MessageHandler that runs h for every message
// and settles it with its fate.
func (r *Runner) Consume(ctx context.Context, h Handler) jetstream.MessageHandler {
	return func(m jetstream.Msg) { r.Run(ctx, m, h) }
}

// keepAlive marks m in progress every KeepAlive until stop is called.
func (r *Runner) keepAlive(m jetstream.Msg) (stop func()) {
	if r.KeepAlive <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(r.KeepAlive)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	}()
	return func() { close(done); <-ended }
}

func (r *Runner) logger() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}
