package test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/teststack"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestOneAgentsFloodLeavesSlotsForOthers: an agent with more long calls
// than a worker has slots holds at most its share of them (3/4 of the
// concurrency by default); another agent's read runs while the flood
// still holds its slots; every call of the flood then runs, once.
func TestOneAgentsFloodLeavesSlotsForOthers(t *testing.T) {
	testenv.LookPath(t, "bash", "bash")
	const slots, share, flood = 8, 6, 12
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "hello\n")
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, "tools:\n  default: allow\nexec:\n  security: full\n  ask: off\n  confirm_dangerous: false\n")
	w := startProcess(t, ws, func(o *daemon.Options) { o.PolicyFile, o.Concurrency = pol, slots })
	flooder := teststack.Client(t, w.url, "flooder")
	other := teststack.Client(t, w.url, "other")
	started := func() int {
		m, _ := filepath.Glob(filepath.Join(ws, "started-*"))
		return len(m)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	results := make(chan *events.ResultData, flood)
	for i := range flood {
		go func() {
			cmd := fmt.Sprintf("touch started-%d; until [ -e release ]; do sleep 0.2; done", i)
			r, err := flooder.Call(ctx, "bash", map[string]any{"command": cmd}, client.WithID(fmt.Sprintf("flood-%d", i)))
			if err != nil {
				t.Errorf("flood call %d: %v", i, err)
			}
			results <- r
		}()
	}
	eventually(t, "the flood holding its share of the slots", func() (bool, string) {
		n := started()
		return n >= share, fmt.Sprintf("%d started", n)
	})

	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	r, err := other.Call(rctx, "read", map[string]any{"path": "README.md"})
	if err != nil || r.Status != events.StatusOK {
		t.Fatalf("the other agent's read behind the flood: %+v, %v (started %d)", r, err, started())
	}
	if n := started(); n != share || len(results) != 0 {
		t.Fatalf("when the read finished: %d flood calls started (want %d, its share), %d finished (want 0)", n, share, len(results))
	}

	writeFile(t, filepath.Join(ws, "release"), "")
	for range flood {
		select {
		case r := <-results:
			if r == nil || r.Status != events.StatusOK {
				t.Errorf("flood result: %+v", r)
			}
		case <-ctx.Done():
			t.Fatalf("flood calls unfinished; %d started", started())
		}
	}
	if n := started(); n != flood {
		t.Errorf("%d flood calls ran, want each of %d once", n, flood)
	}
}
