package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestFairPoolFilledByManyAgentsAtTheirBound: six agents (or one operator
// with six identities) each queue, one agent after the other, exactly
// their documented bound of calls on a worker of 8 slots that runs one
// call per agent (--agent-concurrency 1): one running, --concurrency (8)
// held. Four such agents fill the worker's held pool (4 × --concurrency);
// the calls are bash calls that wait for a release. Then alice reads a
// file. Her read runs while every flood call still waits: none has
// finished and no agent has more than its one call started. Before, the
// full pool stopped the worker asking the server for anyone's call, and
// alice's read waited until the floods drained. Then every flood call
// runs exactly once (each appends a line to a file of its own) and gets
// exactly one result; none is dead-lettered for waiting its turn.
func TestFairPoolFilledByManyAgentsAtTheirBound(t *testing.T) {
	testenv.LookPath(t, "bash", "bash")
	const slots, agents = 8, 6
	const perAgent = 1 + slots // one running, its bound of held calls
	const total = agents * perAgent
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "hello\n")
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, "tools:\n  default: allow\nexec:\n  security: full\n  ask: off\n  confirm_dangerous: false\n")
	metrics := freeAddr(t)
	p := startProcess(t, ws, func(o *daemon.Options) {
		o.PolicyFile, o.Concurrency, o.AgentConcurrency, o.MetricsListen = pol, slots, 1, metrics
	})
	js, err := jetstream.New(dialAs(t, p.url, identity.RoleAdmin, "admin"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	queued := func() (uint64, error) {
		st, err := js.Stream(ctx, bus.StreamCalls)
		if err != nil {
			return 0, err
		}
		return st.CachedInfo().State.Msgs, nil
	}

	results := make(chan floodResult, total)
	for a := range agents {
		agent := fmt.Sprintf("flood%d", a)
		c := p.client(t, agent)
		for i := range perAgent {
			go func() {
				name := fmt.Sprintf("%s-%d", agent, i)
				cmd := fmt.Sprintf("echo ran >> ran-%s; until [ -e release ]; do sleep 0.2; done", name)
				r, err := c.Call(ctx, "bash", map[string]any{"command": cmd}, client.WithID(name))
				if err != nil {
					t.Errorf("flood call %s: %v", name, err)
				}
				results <- floodResult{name, r}
			}()
		}
		// One agent after the other: the stream holds each agent's calls
		// together, so the first four fill the pool.
		eventually(t, agent+"'s calls queued", func() (bool, string) {
			n, err := queued()
			if err != nil {
				return false, err.Error()
			}
			return n >= uint64((a+1)*perAgent), fmt.Sprintf("%d queued", n)
		})
	}
	cons, err := js.Consumer(ctx, bus.StreamCalls, bus.ConsumerWorkers)
	if err != nil {
		t.Fatal(err)
	}
	const fullPool = 4*slots + 4 // four agents' held calls and their running ones
	eventually(t, "the worker's held pool full", func() (bool, string) {
		info, err := cons.Info(ctx)
		if err != nil {
			return false, err.Error()
		}
		return info.NumAckPending >= fullPool, fmt.Sprintf("%d delivered unacked, %d undelivered", info.NumAckPending, info.NumPending)
	})

	alice := p.client(t, "alice")
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	r, err := alice.Call(rctx, "read", map[string]any{"path": "README.md"})
	ran := floodRuns(t, ws)
	if err != nil || r.Status != events.StatusOK {
		t.Fatalf("alice's read behind %d agents at their bound: %+v, %v (%d flood calls started)", agents, r, err, len(ran))
	}
	if len(results) != 0 || len(ran) > agents {
		t.Fatalf("when alice's read finished: %d flood calls finished (want 0), %d started (want at most %d, one per agent)", len(results), len(ran), agents)
	}
	if got := metricSum(t, metrics, "toolgate_agent_requests_refused_total", `bound="held_pool"`); got == 0 {
		t.Error("no flood call went back to the stream at the full held pool")
	}

	writeFile(t, filepath.Join(ws, "release"), "")
	got := map[string]int{}
	for range total {
		select {
		case fr := <-results:
			got[fr.name]++
			if fr.r == nil || fr.r.Status != events.StatusOK {
				t.Errorf("flood call %s: %+v", fr.name, fr.r)
			}
		case <-ctx.Done():
			t.Fatalf("flood calls unfinished: %d of %d results, %d started", len(got), total, len(floodRuns(t, ws)))
		}
	}
	ran = floodRuns(t, ws)
	if len(got) != total || len(ran) != total {
		t.Errorf("%d flood calls answered, %d ran; want each of %d", len(got), len(ran), total)
	}
	for name, n := range ran {
		if n != 1 {
			t.Errorf("flood call %s ran %d times", name, n)
		}
	}
}

// floodResult is the result of one flood call, named.
type floodResult struct {
	name string
	r    *events.ResultData
}

// floodRuns counts the runs of each flood call that started in ws: the
// lines of its ran-<name> file.
func floodRuns(t *testing.T, ws string) map[string]int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(ws, "ran-*"))
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		runs[strings.TrimPrefix(filepath.Base(f), "ran-")] = strings.Count(string(b), "\n")
	}
	return runs
}
