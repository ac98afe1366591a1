package worker

import (
	"encoding/json"
	"strings"
	"testing"

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
