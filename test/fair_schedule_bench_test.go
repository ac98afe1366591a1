package test

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/teststack"
	"github.com/toolgate/toolgate/pkg/client"
)

// BenchmarkFloodWaitingCost measures what a flood of calls past their
// agent's bounds costs while it waits: the CPU time of this process (the
// embedded server and the worker) per second, with 500 calls of one
// agent queued at a worker of 2 slots that runs one call per agent (the
// first runs until released, 2 are held, the rest wait), against the
// same worker idle, in one run:
//
//	go test -run '^$' -bench BenchmarkFloodWaitingCost -benchtime 1x ./test/
//
// Each phase is a window of floodWindow; b.N is not used.
func BenchmarkFloodWaitingCost(b *testing.B) {
	const flood, floodWindow = 500, 20 * time.Second
	ws := teststack.NewWorkspace(b)
	pol := filepath.Join(b.TempDir(), "policy.yaml")
	teststack.WriteFile(b, pol, "tools:\n  default: allow\nexec:\n  security: full\n  ask: off\n  confirm_dangerous: false\n")
	w := teststack.StartWorker(b, ws, func(o *daemon.Options) { o.PolicyFile, o.Concurrency, o.AgentConcurrency = pol, 2, 1 })
	flooder := teststack.Client(b, w.URL, "flooder")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	defer teststack.WriteFile(b, filepath.Join(ws, "release"), "")
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	window := func() float64 {
		c0, t0 := cpu(), time.Now()
		time.Sleep(floodWindow)
		return float64(cpu()-c0) / float64(time.Since(t0)) * 1000 // ms of CPU per second
	}
	idle := window()
	for i := range flood {
		cmd := "until [ -e release ]; do sleep 1; done"
		if _, err := flooder.Submit(ctx, "bash", map[string]any{"command": cmd}, client.WithID(fmt.Sprintf("wait-flood-%d", i))); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(5 * time.Second) // the flood taken and sent away once
	flooded := window()
	b.ReportMetric(idle, "idle-cpu-ms/s")
	b.ReportMetric(flooded, "flood-cpu-ms/s")
	b.ReportMetric((flooded-idle)*1000/flood, "cpu-µs/s-per-waiting-call")
	b.Logf("CPU per second: idle %.1f ms, with %d calls waiting %.1f ms", idle, flood, flooded)
}
