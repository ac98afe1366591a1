package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestFairFloodPastItsBouncesNeverStopsOthers: one agent floods a
// worker of 2 slots that runs one call per agent with more calls than
// the workers consumer lets be delivered unacknowledged (MaxAckPending,
// here 12 instead of 4096; the calls are bash calls that wait for a
// release). Its calls over its bound go back to the stream while they
// have deliveries to spare; then alice reads a file, queued behind the
// whole flood. Her read runs while no flood call has finished and at
// most one has started. Before, each flood call with no delivery to
// spare was held past the bound: 12 of them filled MaxAckPending and the
// server delivered nobody's call until the flood drained. Then every
// flood call runs exactly once (each appends a line to a file of its
// own) and gets exactly one result, though most were requeued.
func TestFairFloodPastItsBouncesNeverStopsOthers(t *testing.T) {
	testenv.LookPath(t, "bash", "bash")
	const slots, maxAckPending, total = 2, 12, 30
	p, metrics, js := startFairWorker(t, slots, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cons, err := js.Consumer(ctx, bus.StreamCalls, bus.ConsumerWorkers)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cons.CachedInfo().Config
	cfg.MaxAckPending = maxAckPending
	if _, err := js.UpdateConsumer(ctx, bus.StreamCalls, cfg); err != nil {
		t.Fatal(err)
	}

	results := make(chan floodResult, total)
	flood(ctx, t, p.client(t, "flood"), "flood", total, results)
	eventually(t, "the flood queued", func() (bool, string) {
		unacked, undelivered, err := workersConsumer(ctx, js)
		if err != nil {
			return false, err.Error()
		}
		return uint64(unacked)+undelivered >= total, fmt.Sprintf("%d delivered unacked, %d undelivered", unacked, undelivered)
	})

	rctx, rcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer rcancel()
	r, err := p.client(t, "alice").Call(rctx, "read", map[string]any{"path": "README.md"})
	ran := floodRuns(t, p.ws)
	if err != nil || r.Status != events.StatusOK {
		unacked, undelivered, _ := workersConsumer(ctx, js)
		t.Fatalf("alice's read behind a flood past its bounces: %+v, %v (%d flood calls started; %d delivered unacked, %d undelivered)", r, err, len(ran), unacked, undelivered)
	}
	if len(results) != 0 || len(ran) > 1 {
		t.Fatalf("when alice's read finished: %d flood calls finished (want 0), %d started (want at most 1)", len(results), len(ran))
	}
	if got := metricSum(t, metrics, "toolgate_agent_requests_refused_total", `bound="requeued"`); got == 0 {
		t.Error("no flood call was requeued")
	}

	releaseFloods(ctx, t, p.ws, results, total)
}
