package worker

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/testenv"
)

// TestHandBackIsConfirmed: a hand-back (a nak with a delay) is a request
// the consumer's server answers, so a hand-back that reached no leader
// is asked again instead of leaving the call a whole ack wait in the
// queue; one answered comes back after its delay, not after the ack wait.
func TestHandBackIsConfirmed(t *testing.T) {
	s := testenv.StartNATS(t, "")
	nc, js := s.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "HB", Subjects: []string{"hb.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, "HB", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "hb.1", []byte("call")); err != nil {
		t.Fatal(err)
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	next := func() *nats.Msg {
		t.Helper()
		if err := nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT.HB.c", inbox, []byte(`{"batch":1,"expires":5000000000}`)); err != nil {
			t.Fatal(err)
		}
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := next()
	// Its ack subject answered by nobody, as while no leader answers: the
	// hand-back says so.
	lost := delivery{m: &nats.Msg{Subject: m.Subject, Reply: "$JS.ACK.nobody.answers", Data: m.Data}, nc: nc, wait: 50 * time.Millisecond}
	if err := lost.NakWithDelay(time.Second); err == nil {
		t.Fatal("a hand-back nobody confirmed reported success")
	}
	start := time.Now()
	if err := (delivery{m: m, nc: nc, wait: 5 * time.Second}).NakWithDelay(200 * time.Millisecond); err != nil {
		t.Fatalf("hand-back not confirmed: %v", err)
	}
	again := next()
	if string(again.Data) != "call" || time.Since(start) > 10*time.Second {
		t.Fatalf("handed back call came back as %q after %s", again.Data, time.Since(start))
	}
	if md, err := again.Metadata(); err != nil || md.NumDelivered != 2 {
		t.Fatalf("redelivery metadata %+v %v", md, err)
	}
}
