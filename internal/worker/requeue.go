package worker

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/fate"
	"github.com/toolgate/toolgate/pkg/events"
)

// HeaderRequeues is the header of a call message the worker requeued: how
// many times the call went to the tail of the calls stream because its
// agent was over its bounds with no delivery to spare (fair.go).
//
// A requeued copy is the same call to everything that reads one: the
// same subject, headers (but this one and Nats-Msg-Id) and data, so the
// same CloudEvent id, call id, claim key (CallKey), result dedup id and
// audit; the cancellation index counts it under the original's id
// (queuedMsgID). Its Nats-Msg-Id is the id it was requeued from (the
// scoped id an agent's publish got, ScopedMsgID, without any earlier
// requeue's prefix) after "<stream sequence>>": the stream drops a second
// copy of the same message as a duplicate, and since no agent name holds
// a '>', no scoped id an agent can have the intake store ever equals a
// copy's id.
//
// Exactly once: the copy is stored (the stream's ack awaited) before the
// original is acked. A worker that dies between the two leaves both in
// the stream: the original is redelivered. Whichever of the two runs
// first, the other does not run the call:
//   - A call that is not pure is claimed by its call id (claim.go), as on
//     any redelivery: the second finds the claim taken and is answered as
//     a duplicate (redelivery.go).
//   - A pure call runs unclaimed only on its first delivery of a message
//     never requeued; a redelivered original (delivered more than once:
//     after looking up a stored result) and a copy (this header) are
//     claimed as any call (handle).
//
// A redelivered original requeued again makes the same copy id: within
// the stream's duplicate window (2 minutes) the stream drops it and the
// original is acked; after it, a second copy is stored, and the claim
// still lets only one of them run.
const HeaderRequeues = "Toolgate-Requeues"

// requeued reports whether msg is a copy the worker requeued.
func requeued(msg callMsg) bool { return msg.Headers().Get(HeaderRequeues) != "" }

// requeueMsgID is the Nats-Msg-Id of the copy of a message whose
// Nats-Msg-Id is id, requeued from stream sequence seq.
func requeueMsgID(id string, seq uint64) string {
	return strconv.FormatUint(seq, 10) + ">" + queuedMsgID(id)
}

// queuedMsgID is the id a call message was published under: its
// Nats-Msg-Id without the prefix of a requeue (requeueMsgID). Agent names
// and call ids hold no '>', so an id with a '>' before its first '.' is a
// copy's.
func queuedMsgID(id string) string {
	if i := strings.IndexByte(id, '>'); i >= 0 && !strings.Contains(id[:i], ".") {
		return id[i+1:]
	}
	return id
}

// requeueCopy is the copy of m that goes to the tail of the calls stream.
func requeueCopy(m callMsg) *nats.Msg {
	h := nats.Header{}
	for k, v := range m.Headers() {
		if strings.HasPrefix(k, "Nats-") {
			continue // the stream's own (expectations of the publish, a TTL): not the call's
		}
		h[k] = append([]string(nil), v...)
	}
	n, _ := strconv.Atoi(h.Get(HeaderRequeues))
	h.Set(HeaderRequeues, strconv.Itoa(n+1))
	h.Set(events.HeaderMsgID, requeueMsgID(m.Headers().Get(events.HeaderMsgID), m.StreamSeq()))
	return &nats.Msg{Subject: m.Subject(), Header: h, Data: m.Data()}
}

// requeue puts a copy of m at the tail of the calls stream and, once the
// stream has stored it (or dropped it as a copy it has), acks m; when the
// copy cannot be stored m goes back to the stream as over its bounds
// (a delayed nak, which spends one of its deliveries: a calls stream
// that stores nothing until m's last one is spent dead-letters it). It
// does not hold up the puller's loop (as handBack).
func (p *puller) requeue(m deliveredMsg) {
	p.slots.Add(1)
	go func() {
		defer p.slots.Done()
		p.w.settle(m, p.w.requeue(m))
	}()
}

// requeue stores m's copy at the tail of the calls stream and returns
// the original's fate: acked once the copy is stored.
func (w *Worker) requeue(m callMsg) fate.Fate {
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.publishTimeout)
	defer cancel()
	c := requeueCopy(m)
	if _, err := w.js.PublishMsg(ctx, c); err != nil {
		w.log.Warn("requeue a call over its agent's bounds: copy not stored; sent back", "subject", m.Subject(), "stream_seq", m.StreamSeq(), "err", err)
		return fate.Retry(overflowDelay*time.Duration(max(1, m.NumDelivered())), err)
	}
	w.log.Debug("call over its agent's bounds requeued", "subject", m.Subject(), "stream_seq", m.StreamSeq(), "id", c.Header.Get(events.HeaderMsgID))
	return fate.Ack()
}
