package test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/teststack"
	"github.com/toolgate/toolgate/pkg/events"
)

// BenchmarkReadCallPath measures one read of a 1 KiB file along the whole
// call path in one process, as an agent makes it: the agent's client
// (encoding, publishing through the worker's intake, verifying the signed
// result), the embedded server, and the worker at its defaults (decode,
// schema, the built-in policy, the read tool, the signed result, the
// audit event stored before the ack). allocs/op counts every part
// (BENCHMARKS.md, "The read call path in one process"):
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
	call := func() {
		r, err := c.Call(ctx, "read", args)
		if err != nil || r.Status != events.StatusOK {
			b.Fatalf("read: %+v %v", r, err)
		}
	}
	for range 50 { // connections, caches, the first chain checkpoint
		call()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		call()
	}
}
