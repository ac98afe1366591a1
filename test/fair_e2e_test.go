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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	started, results := waitingFlood(ctx, t, ws, flooder, flood)
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

	releaseFlood(ctx, t, ws, started, results, flood)
}
