package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// replyBox is a private reply subject with a channel subscription: the
// store acknowledgement of a claim or a result comes straight from the
// connection's reader to the goroutine waiting for it, one wake-up,
// where an asynchronous JetStream publish takes two (the reader hands it
// to the publish handler's goroutine, which hands it to the waiter). A
// call's claim acknowledgement is on its path to the agent, so the
// wake-up saved is latency saved.
//
// A box serves one call at a time (boxes are taken from and returned to
// the worker's free list); each publish gets its own reply subject (the
// box's inbox, a dot, a number), so an acknowledgement that comes after
// its waiter gave up is recognised and dropped by the box's next user.
type replyBox struct {
	owner *replyBoxes
	inbox string
	sub   *nats.Subscription
	ch    chan *nats.Msg
	timer *time.Timer
	seq   uint64
}

// boxDepth is a box's channel capacity: one acknowledgement awaited plus
// room for late ones. A reply that finds it full is dropped by the client
// (counted as a slow consumer); its waiter then times out and falls back
// to a synchronous publish, slower but never wrong. A synchronous
// subscription's channel would hold 64k messages: half a MiB per box.
const boxDepth = 4

// replyBoxes is the worker's free list of reply boxes.
type replyBoxes struct {
	nc   *nats.Conn
	free chan *replyBox
	// load counts the worker's running calls; a box's publish yields to
	// the client's flusher only while it is at most idle, GOMAXPROCS
	// when the boxes were made (see publish).
	load *atomic.Int64
	idle int64
}

func newReplyBoxes(nc *nats.Conn, keep int, load *atomic.Int64) *replyBoxes {
	return &replyBoxes{nc: nc, free: make(chan *replyBox, keep), load: load, idle: int64(runtime.GOMAXPROCS(0))}
}

// busy reports whether the worker runs more calls than it has threads to
// run them on.
func (rb *replyBoxes) busy() bool { return rb.load.Load() > rb.idle }

// get returns a free box, or a new one (nil when the subscription cannot
// be made: the caller then publishes synchronously, as after a timeout).
func (rb *replyBoxes) get() *replyBox {
	select {
	case b := <-rb.free:
		return b
	default:
	}
	inbox := rb.nc.NewInbox()
	ch := make(chan *nats.Msg, boxDepth)
	sub, err := rb.nc.ChanSubscribe(inbox+".*", ch)
	if err != nil {
		return nil
	}
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &replyBox{owner: rb, inbox: inbox, sub: sub, ch: ch, timer: t}
}

// put returns b to the free list, or closes it when the list is full.
func (rb *replyBoxes) put(b *replyBox) {
	if b == nil {
		return
	}
	select {
	case rb.free <- b:
	default:
		_ = b.sub.Unsubscribe()
	}
}

// close unsubscribes the free boxes.
func (rb *replyBoxes) close() {
	for {
		select {
		case b := <-rb.free:
			_ = b.sub.Unsubscribe()
		default:
			return
		}
	}
}

// publish sends m with a reply subject of b's and returns that subject.
// A publish only buffers m and wakes the client's flusher goroutine,
// queued to run on this thread next. When the worker has few calls
// running, publish yields to it, so that m is written now rather than
// when the caller first blocks (for a claim: after validation and the
// gate, which its round trip is meant to overlap; for a result: after the
// audit events' encoding). A busy worker does not: other calls block soon
// enough, and the flusher then writes many messages in one system call
// instead of one each.
func (b *replyBox) publish(m *nats.Msg) (string, error) {
	b.seq++
	m.Reply = b.inbox + "." + strconv.FormatUint(b.seq, 36)
	if err := b.owner.nc.PublishMsg(m); err != nil {
		return "", err
	}
	if !b.owner.busy() {
		runtime.Gosched()
	}
	return m.Reply, nil
}

// errNoAck is a publish whose acknowledgement did not come in time.
var errNoAck = errors.New("no store acknowledgement in time")

// wait returns the stream sequence JetStream acknowledged for the publish
// whose reply subject is reply, or an error: the server's (its API error
// or a no-responders status) or errNoAck after timeout.
func (b *replyBox) wait(reply string, timeout time.Duration) (uint64, error) {
	b.timer.Reset(timeout)
	defer b.timer.Stop()
	for {
		select {
		case m := <-b.ch:
			if m.Subject != reply {
				continue // an earlier publish's late acknowledgement
			}
			return parsePubAck(m)
		case <-b.timer.C:
			return 0, errNoAck
		}
	}
}

// pubAck is JetStream's answer to a publish: the stored message's
// sequence, or an API error (the library's own types, as its publish
// decodes them).
type pubAck struct {
	jetstream.PubAck
	Error *jetstream.APIError `json:"error,omitempty"`
}

func parsePubAck(m *nats.Msg) (uint64, error) {
	if st := m.Header.Get("Status"); st != "" {
		return 0, fmt.Errorf("publish answered with status %s %s", st, m.Header.Get("Description"))
	}
	if seq, ok := ackSeq(m.Data); ok {
		return seq, nil
	}
	var a pubAck
	if err := json.Unmarshal(m.Data, &a); err != nil {
		return 0, fmt.Errorf("publish acknowledgement: %w", err)
	}
	if a.Error != nil {
		return 0, fmt.Errorf("publish refused: %w", a.Error)
	}
	if a.Sequence == 0 {
		return 0, errors.New("publish acknowledgement without a sequence")
	}
	return a.Sequence, nil
}

// ackSeq reads the sequence of a plain acknowledgement,
// {"stream":"NAME","seq":N} or the same with "duplicate":true after it,
// without decoding it: ok is false for anything else (an error, a domain,
// another order), which parsePubAck decodes.
func ackSeq(b []byte) (uint64, bool) {
	rest, ok := bytes.CutPrefix(b, []byte(`{"stream":"`))
	if !ok {
		return 0, false
	}
	end := bytes.IndexByte(rest, '"')
	if end <= 0 || bytes.ContainsFunc(rest[:end], func(r rune) bool { return r == '\\' || r < ' ' }) {
		return 0, false
	}
	if rest, ok = bytes.CutPrefix(rest[end:], []byte(`","seq":`)); !ok {
		return 0, false
	}
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 || (rest[0] == '0' && n > 1) {
		return 0, false
	}
	if tail := string(rest[n:]); tail != "}" && tail != `,"duplicate":true}` {
		return 0, false
	}
	seq, err := strconv.ParseUint(string(rest[:n]), 10, 64)
	if err != nil || seq == 0 {
		return 0, false
	}
	return seq, true
}
