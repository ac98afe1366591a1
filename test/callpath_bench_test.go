package test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/teststack"
	"github.com/toolgate/toolgate/pkg/events"
)

// BenchmarkReadCallPath measures one read of a 1 KiB file along the whole
// call path in one process, as an agent makes it: the agent's client
// (encoding, publishing through the worker's intake, verifying the signed
// result), the embedded server, and the worker at its defaults (decode,
// schema, the built-in policy, the read tool, the signed result, the
// audit event stored before the ack). allocs/op counts every part, and
// cpu-µs/op the CPU time of the whole process (server, worker and
// client) per call (BENCHMARKS.md, "The read call path in one process");
// the /inflight=64 case keeps 64 calls in flight, one client:
//
//	go test -run '^$' -bench BenchmarkReadCallPath -benchmem -benchtime 2000x ./test/
func BenchmarkReadCallPath(b *testing.B) {
	ws := teststack.NewWorkspace(b)
	teststack.WriteFile(b, filepath.Join(ws, "data.txt"), strings.Repeat("0123456789abcde\n", 64))
	w := teststack.StartWorker(b, ws, nil)
	c := teststack.Client(b, w.URL, "bench")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	args := map[string]any{"path": "data.txt"}
	call := func(b *testing.B) {
		r, err := c.Call(ctx, "read", args)
		if err != nil || r.Status != events.StatusOK {
			b.Errorf("read: %+v %v", r, err)
		}
	}
	for range 50 { // connections, caches, the first chain checkpoint
		call(b)
	}
	b.Run("inflight=1", func(b *testing.B) {
		b.ReportAllocs()
		cpu := testenv.ProcessCPU()
		b.ResetTimer()
		for range b.N {
			call(b)
		}
		b.ReportMetric(float64((testenv.ProcessCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	})
	b.Run("inflight=64", func(b *testing.B) {
		b.ReportAllocs()
		cpu := testenv.ProcessCPU()
		b.ResetTimer()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(b.N) {
					call(b)
				}
			}()
		}
		wg.Wait()
		b.ReportMetric(float64((testenv.ProcessCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	})
}
