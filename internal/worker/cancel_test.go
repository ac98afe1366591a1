package worker

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// A cancellation recorded by another worker (its mark in the cancels
// bucket) reaches the worker running the call through its watch.
func TestMarkFromAnotherWorkerStopsTheRunningCall(t *testing.T) {
	s := testenv.StartNATS(t, "")
	ctr := &counter{}
	started := make(chan string, 1)
	startWorker(t, s.ClientURL(), testRegistry(t, ctr, started), Config{Bus: fastBus})
	c, _ := newClient(t, s, "alice")
	ctx := ctxT(t)
	final := make(chan *events.ResultData, 1)
	go func() {
		r, err := c.Call(ctx, "sleep", map[string]any{"ms": 600000}, client.WithID("watched"))
		if err != nil {
			t.Error(err)
		}
		final <- r
	}()
	testenv.Recv(t, started, "started")
	_, js := s.Connect(t)
	kv, err := js.KeyValue(ctx, bus.BucketCancels)
	if err != nil {
		t.Fatal(err)
	}
	mark, _ := json.Marshal(cancelMark{Agent: "alice", CallID: "watched", Worker: "another"})
	if _, err := kv.Put(ctx, CallKey("alice", "watched"), mark); err != nil {
		t.Fatal(err)
	}
	r := testenv.Recv(t, final, "final")
	if r == nil || r.Status != events.StatusCancelled || !strings.Contains(r.Output, "while it ran") || ctr.get("watched") != 1 {
		t.Fatalf("result %+v, runs %d", r, ctr.get("watched"))
	}
}

// TestMadeUpCancelsReadTheQueueOnce: mallory has 40 calls in the calls
// stream (one runs, the others wait) and cancels 30 made-up ids one after
// another. The worker reads her queued calls once, not per cancellation:
// the reads of the calls stream, counted as they go by on the bus, stay
// below half of reading her queue for each (30 × 40). Before, every
// cancellation of an unknown id read her whole queue, one request per
// queued call (1202 reads here, 70 now).
func TestMadeUpCancelsReadTheQueueOnce(t *testing.T) {
	const queued, cancels = 40, 30
	s := testenv.StartNATS(t, "")
	ctr := &counter{}
	started := make(chan string, queued)
	startWorker(t, s.ClientURL(), testRegistry(t, ctr, started), Config{Concurrency: 1, ShutdownGrace: time.Millisecond, Bus: fastBus})
	c, _ := newClient(t, s, "mallory")
	ctx := ctxT(t)
	for i := range queued {
		if _, err := c.Submit(ctx, "sleep", map[string]any{"ms": 600000}, client.WithID(fmt.Sprintf("queued-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Recv(t, started, "started")
	nc, js := s.Connect(t)
	st, err := js.Stream(ctx, bus.StreamCalls)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != queued {
		t.Fatalf("%d calls in the stream, want %d", n, queued)
	}
	var reads atomic.Int64
	for _, subject := range []string{"$JS.API.DIRECT.GET." + bus.StreamCalls + ".>", "$JS.API.DIRECT.GET." + bus.StreamCalls, "$JS.API.STREAM.MSG.GET." + bus.StreamCalls} {
		if _, err := nc.Subscribe(subject, func(*nats.Msg) { reads.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range cancels {
		r, err := c.Cancel(ctx, fmt.Sprintf("made-up-%d", i))
		if err != nil || r.State != events.CancelUnknown {
			t.Fatalf("made-up cancellation %d: %+v %v", i, r, err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := reads.Load(); n >= cancels*queued/2 {
		t.Errorf("%d made-up cancellations read the calls stream %d times with %d calls queued", cancels, n, queued)
	} else {
		t.Logf("%d made-up cancellations with %d calls queued read the calls stream %d times", cancels, queued, n)
	}
}
