package worker

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
)

// TestWorkerHoldsNoMoreCallsThanItsSlots proves that no call waits in the
// worker's client buffer: with every slot busy, the calls delivered and not
// acked are exactly the running ones, and the rest stay in the stream
// where another worker can take them.
func TestWorkerHoldsNoMoreCallsThanItsSlots(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	started := make(chan string, 64)
	reg := testRegistry(t, &ctr, started)
	const slots, calls = 4, 20
	startWorker(t, s.ClientURL(), reg, Config{Name: "w1", Concurrency: slots, ShutdownGrace: time.Millisecond, Bus: fastBus})
	c, nc := newClient(t, s, "hold")
	for i := range calls {
		if _, err := c.Submit(ctxT(t), "sleep", map[string]any{"ms": 600000}, client.WithID(fmt.Sprintf("hold-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for range slots {
		select {
		case <-started:
		case <-ctxT(t).Done():
			t.Fatal("the slots did not fill")
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctxT(t), bus.StreamCalls, bus.ConsumerWorkers)
	if err != nil {
		t.Fatal(err)
	}
	// Several ack waits (2s) pass while the calls run: the heartbeat keeps
	// the running ones, and nothing else is delivered.
	for range 3 {
		info, err := cons.Info(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending != slots || info.NumPending != calls-slots || info.NumWaiting != 0 || info.NumRedelivered != 0 {
			t.Fatalf("delivered unacked %d, pending %d, pull requests waiting %d, redelivered %d; want %d, %d, 0, 0",
				info.NumAckPending, info.NumPending, info.NumWaiting, info.NumRedelivered, slots, calls-slots)
		}
		select {
		case id := <-started:
			t.Fatalf("call %s started with every slot busy", id)
		case <-time.After(3 * time.Second):
		}
	}
	if _, runs := ctr.total(); runs != slots {
		t.Fatalf("%d executions, want %d", runs, slots)
	}
}
