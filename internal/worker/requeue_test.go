package worker

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/fate"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
)

func TestQueuedMsgID(t *testing.T) {
	for _, tt := range []struct{ id, want string }{
		{"alice.c1", "alice.c1"},
		{"17>alice.c1", "alice.c1"},
		{requeueMsgID("17>alice.c1", 40), "alice.c1"},
		{"c1", "c1"},       // an unscoped id
		{"", ""},           // none
		{"a.b>c", "a.b>c"}, // a '>' after the agent is no requeue's (call ids hold none)
	} {
		if got := queuedMsgID(tt.id); got != tt.want {
			t.Errorf("queuedMsgID(%q) = %q, want %q", tt.id, got, tt.want)
		}
	}
	if got := requeueMsgID("17>alice.c1", 40); got != "40>alice.c1" {
		t.Errorf("a copy of a copy is named %q, want 40>alice.c1", got)
	}
}

// TestRequeueIsOneCopy: on a real server, a call requeued is copied to
// the tail of the calls stream (same subject, data and headers, a fresh
// delivery count, Toolgate-Requeues 1) and its original's fate is an
// ack. Requeued again (its worker died before the ack: the original is
// redelivered), the stream drops the second copy as a duplicate and the
// original is acked all the same: one copy. A copy requeued in turn is
// named after its own sequence, counts 2, and is still the call its
// original's id names to the cancellation index.
func TestRequeueIsOneCopy(t *testing.T) {
	s := testenv.StartNATS(t, "")
	_, js := s.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: bus.StreamCalls, Subjects: []string{events.SubjectCalls}, Duplicates: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	orig := &nats.Msg{Subject: "toolgate.call.alice.read", Data: []byte(`{"x":1}`),
		Header: nats.Header{events.HeaderMsgID: {"alice.c1"}, "ce-id": {"c1"}, "traceparent": {"00-abc"}}}
	if _, err := js.PublishMsg(ctx, orig); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateConsumer(ctx, bus.StreamCalls, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	next := func() jsMsg { return nextCall(t, cons) }
	w := copyingWorker(js)

	m := next()
	for range 2 { // the second: after a crash before the original's ack
		if f := w.requeue(m); f.Kind != fate.KindAck {
			t.Fatalf("requeue: %v, want the original acked", f)
		}
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("%d messages in the stream, want the original and one copy", info.State.Msgs)
	}
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
	c := next()
	md, _ := c.Metadata()
	if c.StreamSeq() != 2 || md.NumDelivered != 1 || string(c.Data()) != `{"x":1}` || c.Subject() != orig.Subject ||
		c.Headers().Get("ce-id") != "c1" || c.Headers().Get("traceparent") != "00-abc" ||
		c.Headers().Get(HeaderRequeues) != "1" || c.Headers().Get(events.HeaderMsgID) != "1>alice.c1" || !requeued(c) {
		t.Fatalf("copy: seq %d, delivered %d, subject %s, headers %v, data %s", c.StreamSeq(), md.NumDelivered, c.Subject(), c.Headers(), c.Data())
	}
	if requeued(m) {
		t.Fatal("the original counts as requeued")
	}
	if f := w.requeue(c); f.Kind != fate.KindAck {
		t.Fatalf("requeue of the copy: %v", f)
	}
	cc := next()
	if cc.Headers().Get(HeaderRequeues) != "2" || cc.Headers().Get(events.HeaderMsgID) != "2>alice.c1" || queuedMsgID(cc.Headers().Get(events.HeaderMsgID)) != "alice.c1" {
		t.Fatalf("copy of the copy: headers %v", cc.Headers())
	}
}

// nextCall fetches the next message of cons, waiting up to 10 s.
func nextCall(t *testing.T, cons jetstream.Consumer) jsMsg {
	t.Helper()
	b, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range b.Messages() {
		return jsMsg{m}
	}
	t.Fatal("no message")
	return jsMsg{}
}

// copyingWorker is a worker with only what copies of calls over their
// bounds use (requeue, wait), on js.
func copyingWorker(js jetstream.JetStream) *Worker {
	return &Worker{js: js, log: slog.New(slog.NewTextHandler(io.Discard, nil)), cfg: Config{publishTimeout: 5 * time.Second}}
}

// TestRequeuedPureCallAndItsRedeliveredOriginalRunOnce: a worker died
// between storing a pure call's copy (requeued to the tail, or waiting
// as a schedule that fires a second later) and acking the original, so
// both are queued, the original delivered once already. A worker then
// takes both: the call runs once, and both messages are settled. A pure
// call's first delivery runs unclaimed; the redelivered original and the
// copy are both claimed, so only one runs.
func TestRequeuedPureCallAndItsRedeliveredOriginalRunOnce(t *testing.T) {
	for name, copyOf := range map[string]func(callMsg) *nats.Msg{
		"requeued": requeueCopy,
		"waiting":  func(m callMsg) *nats.Msg { return waitCopy(m, time.Now().Add(time.Second)) },
	} {
		t.Run(name, func(t *testing.T) { redeliveredOriginalAndCopyRunOnce(t, copyOf) })
	}
}

func redeliveredOriginalAndCopyRunOnce(t *testing.T, copyOf func(callMsg) *nats.Msg) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	reg := testRegistry(t, &ctr, nil)
	if err := startWorker(t, s.ClientURL(), reg, Config{Bus: fastBus}).stop(); err != nil { // provisions the bus
		t.Fatal(err)
	}
	_, js := s.Connect(t)
	ctx := ctxT(t)
	ev, err := events.NewCall("pure-rq", "p", events.CallData{Arguments: []byte(`{"text":"x"}`)})
	if err != nil {
		t.Fatal(err)
	}
	orig, err := events.Encode(events.CallSubject("p", "peek"), ev, events.Binary)
	if err != nil {
		t.Fatal(err)
	}
	orig.Header.Set(events.HeaderMsgID, ScopedMsgID("p", "pure-rq"))
	if _, err := js.PublishMsg(ctx, orig); err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, bus.StreamCalls, bus.ConsumerWorkers)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var first jsMsg
	for m := range b.Messages() {
		first = jsMsg{m}
	}
	if first.Msg == nil {
		t.Fatal("the original was not delivered")
	}
	// The dead worker's requeue: the copy stored, the original not acked.
	if _, err := js.PublishMsg(ctx, copyOf(first)); err != nil {
		t.Fatal(err)
	}
	if err := first.Nak(); err != nil {
		t.Fatal(err)
	}

	startWorker(t, s.ClientURL(), reg, Config{Bus: fastBus})
	st, err := js.Stream(ctx, bus.StreamCalls)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d call messages still queued (runs: %d)", info.State.Msgs, ctr.get("pure-rq"))
		}
	}
	if n := ctr.get("pure-rq"); n != 1 {
		t.Fatalf("the pure call ran %d times, want once", n)
	}
}
