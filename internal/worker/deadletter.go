package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/pkg/events"
)

// maxDeliveriesAdvisory is the subject JetStream announces a call on once
// it has been delivered MaxDeliver times without an ack.
var maxDeliveriesAdvisory = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + bus.StreamCalls + "." + bus.ConsumerWorkers

// CodeDeadLetter is the error code of the result of a dead-lettered call.
const CodeDeadLetter = "dead_letter"

// deadLetter listens for calls that exhausted their deliveries. One worker
// of the fleet (a queue group) moves each to toolgate.dlq.<agent>.<tool>,
// answers the agent with an error result, and removes it from the work
// queue, where it would otherwise stay for ever.
func (w *Worker) deadLetter() (*nats.Subscription, error) {
	return w.nc.QueueSubscribe(maxDeliveriesAdvisory, "workers", func(m *nats.Msg) {
		var adv struct {
			StreamSeq  uint64 `json:"stream_seq"`
			Deliveries uint64 `json:"deliveries"`
		}
		if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 {
			w.log.Warn("unreadable max-deliveries advisory", "err", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := w.js.Stream(ctx, bus.StreamCalls)
		if err != nil {
			w.log.Error("dead letter: calls stream", "err", err)
			return
		}
		raw, err := st.GetMsg(ctx, adv.StreamSeq)
		if err != nil {
			return // already removed (acked late, or another worker moved it)
		}
		in, derr := events.DecodeCall(raw.Subject, raw.Header, raw.Data, 0)
		dl := nats.NewMsg(bus.SubjectDeadLetter[:len(bus.SubjectDeadLetter)-1] + tokenOr(in.Agent, "_") + "." + tokenOr(in.Tool, "_"))
		for k, v := range raw.Header {
			dl.Header[k] = v
		}
		dl.Header.Set(nats.MsgIdHdr, fmt.Sprintf("dlq-%d", adv.StreamSeq))
		dl.Header.Set("Toolgate-Original-Subject", raw.Subject)
		dl.Header.Set("Toolgate-Deliveries", fmt.Sprint(adv.Deliveries))
		dl.Data = raw.Data
		if _, err := w.js.PublishMsg(ctx, dl); err != nil {
			w.log.Error("dead letter: publish", "seq", adv.StreamSeq, "err", err)
			return
		}
		w.obs.m.DeadLetters.Add(ctx, 1)
		w.log.Warn("call dead-lettered after max deliveries", "seq", adv.StreamSeq, "call_id", in.ID, "deliveries", adv.Deliveries)
		if derr == nil && events.ValidToken(in.Agent) == nil {
			w.publishResult(in, events.ResultData{CallID: in.ID, Agent: in.Agent, Tool: in.Tool, SessionID: in.Data.SessionID,
				Status: events.StatusError, IsError: true, Error: CodeDeadLetter,
				Output: fmt.Sprintf("not run: the call was delivered %d times without completing and was moved to the dead-letter stream", adv.Deliveries)}, true)
		}
		if err := st.DeleteMsg(ctx, adv.StreamSeq); err != nil {
			w.log.Error("dead letter: remove from queue", "seq", adv.StreamSeq, "err", err)
		}
	})
}
