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
	p, metrics, js := startFairWorker(t, slots, 1)
	ws := p.ws
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
		flood(ctx, t, p.client(t, agent), agent, perAgent, results)
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
	const fullPool = 4*slots + 4 // four agents' held calls and their running ones
	eventually(t, "the worker's held pool full", func() (bool, string) {
		unacked, undelivered, err := workersConsumer(ctx, js)
		if err != nil {
			return false, err.Error()
		}
		return unacked >= fullPool, fmt.Sprintf("%d delivered unacked, %d undelivered", unacked, undelivered)
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

	releaseFloods(ctx, t, ws, results, total)
}

// TestFairSlotTurnsBetweenHeldAndQueued: on a worker of 3 slots running
// one call per agent, three agents each run one call that waits for a
// release, and two of them have 3 more calls held; alice's read waits at
// the server behind them. One flood call ends: its slot goes to alice's
// read, not to the held call of the agent now below its cap, so the read
// runs while every other flood call still waits. Before, a freed slot
// went to held calls first, and the read waited until they drained.
// Then every flood call runs exactly once.
func TestFairSlotTurnsBetweenHeldAndQueued(t *testing.T) {
	testenv.LookPath(t, "bash", "bash")
	const slots, held = 3, 3
	p, _, js := startFairWorker(t, slots, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	results := make(chan floodResult, 2*(1+held)+1)
	total, running := 0, 0
	for _, a := range []struct {
		agent string
		calls int
	}{{"first", 1 + held}, {"second", 1 + held}, {"third", 1}} {
		flood(ctx, t, p.client(t, a.agent), a.agent, a.calls, results)
		total, running = total+a.calls, running+1
		eventually(t, a.agent+"'s calls delivered", func() (bool, string) {
			unacked, undelivered, err := workersConsumer(ctx, js)
			if err != nil {
				return false, err.Error()
			}
			started := len(floodRuns(t, p.ws))
			return unacked == total && undelivered == 0 && started == running, fmt.Sprintf("%d delivered unacked, %d undelivered, %d started", unacked, undelivered, started)
		})
	}

	read := make(chan error, 1)
	go func() {
		r, err := p.client(t, "alice").Call(ctx, "read", map[string]any{"path": "README.md"})
		if err == nil && r.Status != events.StatusOK {
			err = fmt.Errorf("status %s: %s", r.Status, r.Error)
		}
		read <- err
	}()
	eventually(t, "alice's read queued", func() (bool, string) {
		_, undelivered, err := workersConsumer(ctx, js)
		if err != nil {
			return false, err.Error()
		}
		return undelivered == 1, fmt.Sprintf("%d undelivered", undelivered)
	})
	var runningFirst string // whichever of first's calls came first
	for name := range floodRuns(t, p.ws) {
		if strings.HasPrefix(name, "first-") {
			runningFirst = name
		}
	}
	writeFile(t, filepath.Join(p.ws, "release-"+runningFirst), "")
	select {
	case err := <-read:
		if err != nil {
			t.Fatalf("alice's read: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("alice's read never ran after a flood call ended (%d flood calls started)", len(floodRuns(t, p.ws)))
	}
	// The released call's result may come after the read's; no other
	// flood call ends before the release.
	eventually(t, "the released call's result", func() (bool, string) {
		return len(results) >= 1, fmt.Sprintf("%d flood results", len(results))
	})
	if n := len(results); n != 1 {
		t.Fatalf("after alice's read: %d flood calls finished, want 1 (the one released)", n)
	}
	releaseFloods(ctx, t, p.ws, results, total)
}

// startFairWorker starts a worker of slots slots running agentSlots
// calls per agent (0: the default) whose policy allows every bash call
// without asking, with a README.md in its workspace, and mods applied to
// its options; it returns the worker, its metrics address and an admin's
// JetStream.
func startFairWorker(t *testing.T, slots, agentSlots int, mods ...func(*daemon.Options)) (*process, string, jetstream.JetStream) {
	t.Helper()
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "hello\n")
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, "tools:\n  default: allow\nexec:\n  security: full\n  ask: off\n  confirm_dangerous: false\n")
	metrics := freeAddr(t)
	p := startProcess(t, ws, func(o *daemon.Options) {
		o.PolicyFile, o.Concurrency, o.AgentConcurrency, o.MetricsListen = pol, slots, agentSlots, metrics
		for _, mod := range mods {
			mod(o)
		}
	})
	js, err := jetstream.New(dialAs(t, p.url, identity.RoleAdmin, "admin"))
	if err != nil {
		t.Fatal(err)
	}
	return p, metrics, js
}

// workersConsumer reports the workers consumer's calls delivered and not
// acknowledged, and those not delivered yet.
func workersConsumer(ctx context.Context, js jetstream.JetStream) (unacked int, undelivered uint64, err error) {
	cons, err := js.Consumer(ctx, bus.StreamCalls, bus.ConsumerWorkers)
	if err != nil {
		return 0, 0, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, 0, err
	}
	return info.NumAckPending, info.NumPending, nil
}

// floodResult is the result of one flood call, named.
type floodResult struct {
	name string
	r    *events.ResultData
}

// flood sends n bash calls of agent through c at once, named <agent>-<i>
// (their call ids too). Each appends a line to ran-<name> in the
// workspace, then waits until a file release or release-<name> exists
// there. Each call's result (nil on error) comes on results.
func flood(ctx context.Context, t *testing.T, c *client.Client, agent string, n int, results chan<- floodResult) {
	for i := range n {
		go func() {
			name := fmt.Sprintf("%s-%d", agent, i)
			cmd := fmt.Sprintf("echo ran >> ran-%s; until [ -e release ] || [ -e release-%[1]s ]; do sleep 0.2; done", name)
			r, err := c.Call(ctx, "bash", map[string]any{"command": cmd}, client.WithID(name))
			if err != nil {
				t.Errorf("flood call %s: %v", name, err)
			}
			results <- floodResult{name, r}
		}()
	}
}

// releaseFloods lets every flood call end, takes the total results still
// to come on results, and checks that every call whose run started in ws
// got exactly one result, succeeded and ran exactly once.
func releaseFloods(ctx context.Context, t *testing.T, ws string, results <-chan floodResult, total int) {
	t.Helper()
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
	ran := floodRuns(t, ws)
	if len(got) != total || len(ran) != total {
		t.Errorf("%d flood calls answered, %d ran; want each of %d", len(got), len(ran), total)
	}
	for name, n := range got {
		if n != 1 {
			t.Errorf("flood call %s answered %d times", name, n)
		}
	}
	for name, n := range ran {
		if n != 1 {
			t.Errorf("flood call %s ran %d times", name, n)
		}
	}
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
