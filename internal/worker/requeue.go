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

// HeaderRequeues is the header of a call message the worker copied
// because its agent was over its bounds (fair.go): how many times the
// call went to the tail of the calls stream (requeue, with no delivery
// to spare) or waited there as a message schedule (wait.go).
//
// A copy is the same call to everything that reads one: the same
// subject, headers (but this one, HeaderQueuedID and the stream's own
// Nats-* headers) and data, so the same CloudEvent id, call id, claim key
// (CallKey), result dedup id and audit; the cancellation index counts it
// under the original's id (queuedID). Its Nats-Msg-Id is the id it was
// copied from (the scoped id an agent's publish got, ScopedMsgID, without
// any earlier copy's prefix) after "<stream sequence>>": the stream drops
// a second copy of the same message as a duplicate, and since no agent
// name holds a '>', no scoped id an agent can have the intake store ever
// equals a copy's id. A schedule's fired copy loses its Nats-Msg-Id (the
// server drops it): HeaderQueuedID keeps the original's. The intake
// refuses both headers from an agent.
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

// HeaderQueuedID is the header of a copy the worker made of a call
// message over its agent's bounds: the scoped id the call was published
// under (queuedMsgID of the original's Nats-Msg-Id).
const HeaderQueuedID = "Toolgate-Queued-Id"

// requeued reports whether msg is a copy the worker requeued or that
// waited as a schedule.
func requeued(msg callMsg) bool { return msg.Headers().Get(HeaderRequeues) != "" }

// queuedID is the id the call message whose headers are h was published
// under: the original's own id carried by a copy (HeaderQueuedID), or
// its Nats-Msg-Id without a copy's prefix.
func queuedID(h nats.Header) string {
	if id := h.Get(HeaderQueuedID); id != "" {
		return id
	}
	return queuedMsgID(h.Get(events.HeaderMsgID))
}

// requeueMsgID is the Nats-Msg-Id of the copy of a message published
// under id (its Nats-Msg-Id, or queuedID), copied from stream sequence
// seq.
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
	return &nats.Msg{Subject: m.Subject(), Header: copyHeaders(m), Data: m.Data()}
}

// copyHeaders are the headers of a copy of m (HeaderRequeues).
func copyHeaders(m callMsg) nats.Header {
	h := callHeaders(m.Headers())
	n, _ := strconv.Atoi(h.Get(HeaderRequeues))
	h.Set(HeaderRequeues, strconv.Itoa(n+1))
	id := queuedID(m.Headers())
	h.Set(events.HeaderMsgID, requeueMsgID(id, m.StreamSeq()))
	if id != "" {
		h.Set(HeaderQueuedID, id)
	}
	return h
}

// away settles m, a call over its agent's bounds, with the fate send
// gives it once it has stored m's copy (requeue, wait), without holding
// up the puller's loop (as handBack).
func (p *puller) away(m deliveredMsg, send func(callMsg) fate.Fate) {
	p.slots.Add(1)
	go func() {
		defer p.slots.Done()
		p.w.settle(m, send(m))
	}()
}

// requeue stores m's copy at the tail of the calls stream and returns
// the original's fate: acked once the stream has stored the copy (or
// dropped it as a copy it has). When the copy cannot be stored m goes
// back to the stream as over its bounds (a delayed nak, which spends one
// of its deliveries: a calls stream that stores nothing until m's last
// one is spent dead-letters it).
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

// callHeaders is a copy of the headers of a stored call message without
// the stream's own ("Nats-*": expectations of the publish, a TTL, a fired
// schedule's Nats-Schedule-Next), which are not the call's and which a
// stream would act on again.
func callHeaders(stored nats.Header) nats.Header {
	h := nats.Header{}
	for k, v := range stored {
		if !strings.HasPrefix(k, "Nats-") {
			h[k] = append([]string(nil), v...)
		}
	}
	return h
}
