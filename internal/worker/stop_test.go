package worker

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestStopStrandsNoCall stops a worker while 64 calls are being queued and
// delivered to it: every call delivered to it, or to the pull requests it
// left open at the server, either runs there or is handed back at once.
// The ack wait is five minutes, so a call stranded at the stopped worker
// would be decided only after the test's deadline; a second worker, started
// once the first has stopped, decides every call the first did not run,
// and each call runs exactly once.
func TestStopStrandsNoCall(t *testing.T) {
	tests := []struct {
		name string
		// slots is the first worker's concurrency; it stops once
		// stopAfter calls have started.
		slots, stopAfter int
	}{
		{name: "a burst to an idle worker", slots: 64, stopAfter: 1},
		{name: "stopped as the last call is queued", slots: 64, stopAfter: 0},
		{name: "calls streaming through a busy worker", slots: 8, stopAfter: 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { testStopStrandsNoCall(t, tt.slots, tt.stopAfter) })
	}
}

func testStopStrandsNoCall(t *testing.T, slots, stopAfter int) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	const n = 64
	started := make(chan string, 2*n)
	reg := testRegistry(t, &ctr, started)
	slow := bus.Config{AckWait: 5 * time.Minute, MaxDeliver: 5}
	w1 := startWorker(t, s.ClientURL(), reg, Config{Name: "w1", Concurrency: slots, ShutdownGrace: time.Minute, Bus: slow})
	c, nc := newClient(t, s, "stop")
	results, err := nc.SubscribeSync(events.ResultsOf("stop"))
	if err != nil {
		t.Fatal(err)
	}
	// The calls are submitted all at once, and the worker stops as soon as
	// the first runs: the others are then queued, on their way to it, or
	// in its client.
	var submitted sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		submitted.Go(func() {
			if _, err := c.Submit(ctxT(t), "sleep", map[string]any{"ms": 5}, client.WithID(fmt.Sprintf("stop-%d", i))); err != nil {
				errs <- err
			}
		})
	}
	if stopAfter == 0 {
		submitted.Wait()
	}
	for range stopAfter {
		select {
		case <-started:
		case <-ctxT(t).Done():
			t.Fatal("the calls did not start")
		}
	}
	if err := w1.stop(); err != nil {
		t.Fatal(err)
	}
	submitted.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ranFirst, handedBack := w1.w.Executions(), w1.w.handedBack.Load()
	w2 := startWorker(t, s.ClientURL(), reg, Config{Name: "w2", Concurrency: n, Bus: slow})
	final := map[string]bool{}
	for len(final) < n {
		m, err := results.NextMsg(time.Until(deadline(t)))
		if err != nil {
			t.Fatalf("%d of %d calls decided (the first worker ran %d and handed back %d): %v", len(final), n, ranFirst, handedBack, err)
		}
		var r events.ResultData
		if _, err := events.DecodeData(m.Header, m.Data, &r); err != nil {
			t.Fatal(err)
		}
		if r.Status.Final() {
			if r.Status != events.StatusOK {
				t.Fatalf("result %+v", r)
			}
			final[r.CallID] = true
		}
	}
	if calls, runs := ctr.total(); calls != n || runs != n {
		t.Fatalf("%d calls ran %d times, want %d and %d", calls, runs, n, n)
	}
	if got := ranFirst + w2.w.Executions(); got != n {
		t.Fatalf("the first worker ran %d and the second %d, want %d in all", ranFirst, w2.w.Executions(), n)
	}
	t.Logf("the first worker ran %d calls and handed back %d; the second ran %d", ranFirst, handedBack, w2.w.Executions())
}

// deadline is when the test gives up waiting for results: well before
// the five-minute ack wait of TestStopStrandsNoCall.
func deadline(t *testing.T) time.Time {
	d, ok := t.Deadline()
	if limit := time.Now().Add(60 * time.Second); !ok || d.After(limit) {
		d = limit
	}
	return d
}
