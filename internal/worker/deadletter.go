package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/fate"
	"github.com/toolgate/toolgate/pkg/events"
)

// CodeDeadLetter is the error code of the result of a dead-lettered call.
const CodeDeadLetter = "dead_letter"

// deadLetter takes the max-deliveries advisories of the workers consumer
// from the advisories stream, through the durable consumer every worker
// shares, so an advisory announced while no worker was connected is still
// handled. For each, one worker moves the call to
// toolgate.dlq.<agent>.<tool>, answers the agent with an error result, and
// removes the call from the work queue, where it would otherwise stay for
// ever; then it acks the advisory. A step that fails leaves the advisory
// to be delivered again; every step is idempotent (dedup ids, a removed
// call is not found).
func (w *Worker) deadLetter(ctx context.Context) (jetstream.ConsumeContext, error) {
	cons, err := w.js.Consumer(ctx, bus.StreamAdvisories, bus.ConsumerDeadLetters)
	if err != nil {
		return nil, err
	}
	r := fate.Runner{Consumer: bus.ConsumerDeadLetters, Logger: w.log, Count: w.countFate}
	return cons.Consume(r.Consume(ctx, func(_ context.Context, m fate.Message) fate.Fate {
		if err := w.deadLetterOne(m.Data()); err != nil {
			return fate.Retry(time.Second, fmt.Errorf("dead letter: %w", err))
		}
		return fate.Ack()
	}), jetstream.PullMaxMessages(4))
}

// deadLetterOne moves the call a max-deliveries advisory names. A nil
// error means the advisory is dealt with.
func (w *Worker) deadLetterOne(advisory []byte) error {
	var adv struct {
		StreamSeq  uint64 `json:"stream_seq"`
		Deliveries uint64 `json:"deliveries"`
	}
	if err := json.Unmarshal(advisory, &adv); err != nil || adv.StreamSeq == 0 {
		w.log.Warn("unreadable max-deliveries advisory", "err", err)
		return nil // nothing to retry
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := w.js.Stream(ctx, bus.StreamCalls)
	if err != nil {
		return fmt.Errorf("calls stream: %w", err)
	}
	raw, err := st.GetMsg(ctx, adv.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // already removed (acked late, or moved before)
	}
	if err != nil {
		return fmt.Errorf("read call %d: %w", adv.StreamSeq, err)
	}
	in, derr := events.DecodeCall(raw.Subject, raw.Header, raw.Data, 0)
	dl := nats.NewMsg(bus.SubjectDeadLetter[:len(bus.SubjectDeadLetter)-1] + tokenOr(in.Agent, "_") + "." + tokenOr(in.Tool, "_"))
	// Not the stream's own headers: a fired schedule's
	// Nats-Schedule-Next: purge is refused by a stream without schedules.
	dl.Header = callHeaders(raw.Header)
	dl.Header.Set(nats.MsgIdHdr, fmt.Sprintf("dlq-%d", adv.StreamSeq))
	dl.Header.Set("Toolgate-Original-Subject", raw.Subject)
	dl.Header.Set("Toolgate-Deliveries", fmt.Sprint(adv.Deliveries))
	dl.Data = raw.Data
	if _, err := w.js.PublishMsg(ctx, dl); err != nil {
		return fmt.Errorf("publish dead letter %d: %w", adv.StreamSeq, err)
	}
	w.obs.m.DeadLetters.Add(ctx, 1)
	w.log.Warn("call dead-lettered after max deliveries", "seq", adv.StreamSeq, "call_id", in.ID, "deliveries", adv.Deliveries)
	if derr == nil && events.ValidToken(in.Agent) == nil {
		res := events.ResultData{CallID: in.ID, Agent: in.Agent, Tool: in.Tool, SessionID: in.Data.SessionID,
			Status: events.StatusError, IsError: true, Error: CodeDeadLetter,
			Output: fmt.Sprintf("not run: the call was delivered %d times without completing and was moved to the dead-letter stream", adv.Deliveries)}
		if err := w.publish(in, res, true, nil); err != nil {
			return err
		}
	}
	if err := st.DeleteMsg(ctx, adv.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("remove call %d from the queue: %w", adv.StreamSeq, err)
	}
	return nil
}
