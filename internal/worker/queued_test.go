package worker

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// queuedFake is the stream's queue of each agent as the quota's count
// sees it, and the clock, both in the test's hands.
type queuedFake struct {
	queued  map[string]int
	fail    error
	counts  int
	refused int
	now     time.Time
}

func newQueuedFake(quota int) (*queuedFake, *queuedQuota) {
	f := &queuedFake{queued: map[string]int{}, now: time.Unix(1e9, 0)}
	q := newQueuedQuota(quota, func(agent string) (int, error) {
		f.counts++
		return f.queued[agent], f.fail
	}, func() time.Time { return f.now }, func() { f.refused++ }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return f, q
}

// TestQueuedQuotaCountsEveryStep: an agent's queue is counted at its
// first call, then once every step calls, fewer as it nears the quota;
// at the quota its calls are refused with an error naming the count and
// the quota, and counted again at most once a second.
func TestQueuedQuotaCountsEveryStep(t *testing.T) {
	const quota = 80 // step 10
	f, q := newQueuedFake(quota)
	if q.step != 10 {
		t.Fatalf("step %d, want 10", q.step)
	}
	// Each call forwarded is queued: the stream's count follows.
	send := func(n int) (admitted, refused int) {
		for range n {
			if err := q.admit("a"); err != nil {
				if !errors.Is(err, ErrQueuedCallsQuota) {
					t.Fatalf("refusal %v is not ErrQueuedCallsQuota", err)
				}
				refused++
				continue
			}
			admitted++
			f.queued["a"]++
		}
		return admitted, refused
	}
	for _, c := range []struct {
		send, admitted, counts int
	}{
		{1, 1, 1},   // counted at the first call
		{9, 9, 1},   // the rest of the step
		{1, 1, 2},   // the next step counted
		{59, 59, 7}, // 70 queued: counted at 10, 20, ... 70
		{5, 5, 8},   // counted at 70 with 10 left: a step of 10
		{5, 5, 8},   // 80 queued
	} {
		a, r := send(c.send)
		if a != c.admitted || r != 0 || f.counts != c.counts {
			t.Fatalf("after %d calls: %d admitted, %d refused, %d counts; want %d, 0, %d", c.send, a, r, f.counts, c.admitted, c.counts)
		}
	}
	// At the quota: counted once, refused; no count again within a second.
	err := q.admit("a")
	if !errors.Is(err, ErrQueuedCallsQuota) || !strings.Contains(err.Error(), "agent a has 80 calls queued, its quota is 80") {
		t.Fatalf("the call at the quota: %v", err)
	}
	if _, r := send(100); r != 100 || f.counts != 9 || f.refused != 101 {
		t.Fatalf("over the quota: %d of 100 refused, %d counts (want 9), %d refused counted", r, f.counts, f.refused)
	}
	// A second later, with 40 run, the agent is let in again.
	f.now = f.now.Add(queuedRecount)
	f.queued["a"] -= 40
	if a, r := send(10); a != 10 || r != 0 || f.counts != 10 {
		t.Fatalf("after its queue drained: %d admitted, %d refused, %d counts", a, r, f.counts)
	}
	// Another agent is counted on its own; near the quota (its calls
	// forwarded by other workers), it is counted again sooner.
	f.queued["b"] = quota - 4
	for i := range 4 {
		if err := q.admit("b"); err != nil || f.counts != 11 {
			t.Fatalf("another agent's call %d: %v, %d counts (want 11)", i, err, f.counts)
		}
		f.queued["b"]++
	}
	if err := q.admit("b"); !errors.Is(err, ErrQueuedCallsQuota) || f.counts != 12 {
		t.Fatalf("another agent's call at its quota: %v, %d counts (want 12)", err, f.counts)
	}
}

// TestQueuedQuotaCountFails: a count that fails lets an agent under its
// quota forward another step (a slow stream refuses no one), and keeps an
// agent over its quota refused.
func TestQueuedQuotaCountFails(t *testing.T) {
	f, q := newQueuedFake(16) // step 2
	f.fail = errors.New("stream slow")
	for i := range 5 {
		if err := q.admit("a"); err != nil {
			t.Fatalf("call %d with the count failing: %v", i, err)
		}
	}
	if f.counts != 3 { // at calls 1, 3, 5
		t.Fatalf("%d counts, want 3", f.counts)
	}
	f.fail, f.queued["b"] = nil, 16
	if err := q.admit("b"); !errors.Is(err, ErrQueuedCallsQuota) {
		t.Fatalf("b at its quota: %v", err)
	}
	f.fail = errors.New("stream slow")
	f.now = f.now.Add(queuedRecount)
	if err := q.admit("b"); !errors.Is(err, ErrQueuedCallsQuota) {
		t.Fatalf("b over its quota, the count failing: %v", err)
	}
}

// TestQueuedQuotaOff: a negative quota counts nothing and refuses
// nothing.
func TestQueuedQuotaOff(t *testing.T) {
	f, q := newQueuedFake(-1)
	f.queued["a"] = 1 << 20
	for range 1000 {
		if err := q.admit("a"); err != nil {
			t.Fatal(err)
		}
	}
	if f.counts != 0 || len(q.agents) != 0 {
		t.Fatalf("%d counts, %d agents kept", f.counts, len(q.agents))
	}
}

// TestQueuedQuotaForgetsIdleAgents: an agent with no call for a while is
// forgotten (its next call is counted first), so the quota's state holds
// only the agents sending calls.
func TestQueuedQuotaForgetsIdleAgents(t *testing.T) {
	f, q := newQueuedFake(DefaultMaxQueuedCalls)
	for i := range 1000 {
		if err := q.admit(fmt.Sprint("agent-", i)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		f.now = f.now.Add(queuedIdle)
		for range queuedPruneEvery {
			if err := q.admit("busy"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(q.agents) != 1 || q.agents["busy"] == nil {
		t.Fatalf("%d agents kept after two idle minutes, want only busy", len(q.agents))
	}
	counts := f.counts
	if err := q.admit("agent-1"); err != nil || f.counts != counts+1 {
		t.Fatalf("a forgotten agent's call: %v, %d counts (want %d)", err, f.counts, counts+1)
	}
}

// BenchmarkQueuedQuotaAdmit is the intake's cost of the quota for a call
// of an agent under its quota (the count, every step calls, costs
// nothing here: its request is the stream's):
//
//	go test -run '^$' -bench BenchmarkQueuedQuotaAdmit -benchmem ./internal/worker/
func BenchmarkQueuedQuotaAdmit(b *testing.B) {
	q := newQueuedQuota(DefaultMaxQueuedCalls, func(string) (int, error) { return 0, nil }, time.Now, func() {},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	b.ReportAllocs()
	for b.Loop() {
		if err := q.admit("bench"); err != nil {
			b.Fatal(err)
		}
	}
}
