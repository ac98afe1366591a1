package test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/teststack"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// BenchmarkReadBesideFlood measures another agent's read while one agent
// holds 64 long bash calls in flight, against the same worker idle, in one
// run (BENCHMARKS.md, "Fair share"):
//
//	go test -run '^$' -bench BenchmarkReadBesideFlood -benchtime 300x ./test/
//
// b.N reads are timed in each phase, one at a time; the worker runs at its
// default concurrency and agent share.
func BenchmarkReadBesideFlood(b *testing.B) {
	const flood = 64
	ws := teststack.NewWorkspace(b)
	teststack.WriteFile(b, filepath.Join(ws, "README.md"), string(make([]byte, 1024)))
	pol := filepath.Join(b.TempDir(), "policy.yaml")
	teststack.WriteFile(b, pol, "tools:\n  default: allow\nexec:\n  security: full\n  ask: off\n  confirm_dangerous: false\n")
	w := teststack.StartWorker(b, ws, func(o *daemon.Options) { o.PolicyFile = pol })
	reader := teststack.Client(b, w.URL, "reader")
	flooder := teststack.Client(b, w.URL, "flooder")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	p50 := func(phase string) time.Duration {
		lat := make([]time.Duration, 0, b.N)
		for range b.N {
			t0 := time.Now()
			r, err := reader.Call(ctx, "read", map[string]any{"path": "README.md"})
			if err != nil || r.Status != events.StatusOK {
				b.Fatalf("%s read: %+v %v", phase, r, err)
			}
			lat = append(lat, time.Since(t0))
		}
		slices.Sort(lat)
		return lat[len(lat)/2]
	}
	p50("warm-up") // connections, caches: not the idle worker's cost
	idle := p50("idle")

	done := make(chan struct{}, flood)
	for i := range flood {
		go func() {
			cmd := fmt.Sprintf("touch running-%d; until [ -e release ]; do sleep 1; done", i)
			_, _ = flooder.Call(ctx, "bash", map[string]any{"command": cmd}, client.WithID(fmt.Sprintf("bench-flood-%d", i)))
			done <- struct{}{}
		}()
	}
	// The flood holds its share of the slots before the reads begin.
	c := worker.DefaultConcurrency()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		m, _ := filepath.Glob(filepath.Join(ws, "running-*"))
		if len(m) >= min(flood, c-c/4) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the flood never took its share: %d running", len(m))
		}
	}
	b.ResetTimer()
	flooded := p50("beside the flood")
	b.StopTimer()
	m, _ := filepath.Glob(filepath.Join(ws, "running-*"))
	teststack.WriteFile(b, filepath.Join(ws, "release"), "")
	for range flood {
		<-done
	}
	b.ReportMetric(float64(idle.Microseconds()), "idle-p50-µs")
	b.ReportMetric(float64(flooded.Microseconds()), "flood-p50-µs")
	b.ReportMetric(float64(flooded)/float64(idle), "ratio")
	b.ReportMetric(float64(len(m)), "flood-running")
	b.Logf("read p50 idle %v, beside %d flood calls (%d running) %v: %.2f×", idle, flood, len(m), flooded, float64(flooded)/float64(idle))
}
