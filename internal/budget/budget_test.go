package budget

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/eventsig"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// env is a real server with the bus provisioned.
type env struct {
	t *testing.T
	s *testenv.Server
}

func newEnv(t *testing.T) *env {
	t.Helper()
	s := testenv.StartNATS(t, "")
	_, js := s.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, s: s}
}

// enforcer returns an enforcer of its own connection (a worker of its
// own) over budgets.
func (e *env) enforcer(name string, lease time.Duration, budgets ...policy.Budget) *Enforcer {
	e.t.Helper()
	_, js := e.s.Connect(e.t)
	en, err := New(context.Background(), js, Config{Worker: name, Lease: lease, Logger: quiet(),
		Budgets: func() []policy.Budget { return budgets }})
	if err != nil {
		e.t.Fatal(err)
	}
	return en
}

func (e *env) usage(f Filter) []Usage {
	e.t.Helper()
	_, js := e.s.Connect(e.t)
	kv, err := js.KeyValue(context.Background(), bus.BucketBudgets)
	if err != nil {
		e.t.Fatal(err)
	}
	us, err := List(context.Background(), kv, f)
	if err != nil {
		e.t.Fatal(err)
	}
	return us
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestCallsAcrossTwoEnforcersStopAtTheLimit(t *testing.T) {
	e := newEnv(t)
	b := policy.Budget{Name: "hourly", Scope: policy.ScopeAgent, MaxCalls: 7, Per: time.Hour}
	a, c := e.enforcer("w1", 0, b), e.enforcer("w2", 0, b)
	ctx := ctxT(t)
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			en := a
			if i%2 == 1 {
				en = c
			}
			ch, err := en.Charge(ctx, Use{CallID: fmt.Sprintf("c%d", i), Agent: "alice", Tool: "echo"})
			var ex *ExceededError
			switch {
			case err == nil:
				ok.Add(1)
				ch.Release(ctx)
			case errors.As(err, &ex) && errors.Is(err, tools.ErrBudgetExceeded):
				refused.Add(1)
				if ex.Limit != LimitCalls || ex.ResetsAt.IsZero() {
					t.Errorf("refusal = %+v", ex)
				}
			default:
				t.Errorf("charge: %v", err)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 7 || refused.Load() != 13 {
		t.Fatalf("charged %d, refused %d; want 7 and 13", ok.Load(), refused.Load())
	}
	us := e.usage(Filter{Agent: "alice"})
	if len(us) != 1 || us[0].Calls != 7 || len(us[0].Running) != 0 || us[0].MaxCalls != 7 {
		t.Fatalf("usage = %+v", us)
	}
}

func TestChargingACallAgainCountsItOnce(t *testing.T) {
	e := newEnv(t)
	b := policy.Budget{Name: "life", Scope: policy.ScopeSession, MaxCalls: 2}
	a, c := e.enforcer("w1", 0, b), e.enforcer("w2", 0, b)
	ctx := ctxT(t)
	u := Use{CallID: "same", Agent: "alice", Session: "s1", Tool: "read"}
	ch1, err := a.Charge(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	// The same call again, on another worker (a retry after a lost
	// answer, a redelivery): not counted again.
	if _, err := c.Charge(ctx, u); err != nil {
		t.Fatal(err)
	}
	if us := e.usage(Filter{Session: "s1"}); len(us) != 1 || us[0].Calls != 1 {
		t.Fatalf("usage after charging one call twice = %+v", us)
	}
	ch1.Release(ctx)
	ch1.Release(ctx) // released twice: counted once
	if _, err := a.Charge(ctx, Use{CallID: "other", Agent: "alice", Session: "s1", Tool: "read"}); err != nil {
		t.Fatal(err)
	}
	_, err = a.Charge(ctx, Use{CallID: "third", Agent: "alice", Session: "s1", Tool: "read"})
	var ex *ExceededError
	if !errors.As(err, &ex) || ex.Limit != LimitCalls || !strings.Contains(err.Error(), "does not reset for the lifetime of the session") {
		t.Fatalf("third call of the session: %v", err)
	}
	// Another session has its own counter.
	if _, err := a.Charge(ctx, Use{CallID: "fourth", Agent: "alice", Session: "s2", Tool: "read"}); err != nil {
		t.Fatalf("another session: %v", err)
	}
}

func TestConcurrencyLimitAndLapsedLease(t *testing.T) {
	e := newEnv(t)
	b := policy.Budget{Name: "slots", Scope: policy.ScopeAgent, MaxConcurrent: 2}
	lease := 2 * time.Second
	dead, live := e.enforcer("dead", lease, b), e.enforcer("live", lease, b)
	ctx := ctxT(t)
	for i := range 2 {
		if _, err := dead.Charge(ctx, Use{CallID: fmt.Sprintf("d%d", i), Agent: "bob", Tool: "bash"}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := live.Charge(ctx, Use{CallID: "l0", Agent: "bob", Tool: "bash"})
	var ex *ExceededError
	if !errors.As(err, &ex) || ex.Limit != LimitConcurrent || ex.Used != 2 || !strings.Contains(err.Error(), "a slot frees when one of them ends") {
		t.Fatalf("third running call: %v", err)
	}
	// The worker holding both slots dies (it never renews nor releases):
	// once its leases lapse the slots are free again.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ch, err := live.Charge(ctx, Use{CallID: "l0", Agent: "bob", Tool: "bash"})
		if err == nil {
			ch.Release(ctx)
			break
		}
		if !errors.As(err, &ex) || time.Now().After(deadline) {
			t.Fatalf("slot of a dead worker never freed: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	us := e.usage(Filter{Agent: "bob"})
	if len(us) != 1 || len(us[0].Running) != 0 || us[0].Calls != 3 {
		t.Fatalf("usage = %+v", us)
	}
	// The dead worker's calls are counted up to their lapsed leases.
	if us[0].TimeMS < lease.Milliseconds() {
		t.Fatalf("time of the lapsed calls not counted: %d ms", us[0].TimeMS)
	}
}

func TestRenewedLeaseKeepsItsSlot(t *testing.T) {
	e := newEnv(t)
	b := policy.Budget{Name: "one", Scope: policy.ScopeAgent, MaxConcurrent: 1}
	lease := 900 * time.Millisecond
	holder, other := e.enforcer("holder", lease, b), e.enforcer("other", lease, b)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	go holder.Run(ctx)
	u := Use{CallID: "long", Agent: "carol", Tool: "bash"}
	ch, err := holder.Charge(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	first := e.usage(Filter{Agent: "carol"})[0].Running[u.callKey()].Until
	// Wait for a renewal past the first lease, then for the first lease
	// to be over: the slot is still taken.
	for {
		if l, ok := e.usage(Filter{Agent: "carol"})[0].Running[u.callKey()]; ok && l.Until.After(first) && time.Now().After(first) {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the lease was never renewed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := other.Charge(ctx, Use{CallID: "o", Agent: "carol", Tool: "bash"}); !errors.Is(err, tools.ErrBudgetExceeded) {
		t.Fatalf("while the renewed slot is held: %v", err)
	}
	ch.Release(ctx)
	if _, err := other.Charge(ctx, Use{CallID: "after", Agent: "carol", Tool: "bash"}); err != nil {
		t.Fatalf("after release: %v", err)
	}
}

func TestMaxTimeBoundsAndRefuses(t *testing.T) {
	e := newEnv(t)
	b := policy.Budget{Name: "time", Scope: policy.ScopeAgent, MaxTime: 300 * time.Millisecond, Per: 24 * time.Hour}
	en := e.enforcer("w", 0, b)
	ctx := ctxT(t)
	ch, err := en.Charge(ctx, Use{CallID: "a", Agent: "dan", Tool: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	if ch.Remaining != 300*time.Millisecond {
		t.Fatalf("remaining = %s", ch.Remaining)
	}
	time.Sleep(350 * time.Millisecond) // the call runs past the budget's time
	ch.Release(ctx)
	_, err = en.Charge(ctx, Use{CallID: "b", Agent: "dan", Tool: "bash"})
	var ex *ExceededError
	if !errors.As(err, &ex) || ex.Limit != LimitTime || !strings.Contains(err.Error(), "resets at") {
		t.Fatalf("after the time is spent: %v", err)
	}
}

func TestSeveralBudgetsRefuseWithoutCharging(t *testing.T) {
	e := newEnv(t)
	wide := policy.Budget{Name: "wide", Scope: policy.ScopeAgent, MaxCalls: 100}
	bash := policy.Budget{Name: "bash-only", Scope: policy.ScopeAgent, Tools: []string{"bash"}, MaxCalls: 1}
	en := e.enforcer("w", 0, wide, bash)
	ctx := ctxT(t)
	for i, tool := range []string{"bash", "read", "bash", "read"} {
		_, err := en.Charge(ctx, Use{CallID: fmt.Sprintf("c%d", i), Agent: "eve", Tool: tool})
		if want := i == 2; errors.Is(err, tools.ErrBudgetExceeded) != want {
			t.Fatalf("call %d (%s): err = %v", i, tool, err)
		}
	}
	byName := map[string]Usage{}
	for _, u := range e.usage(Filter{Agent: "eve"}) {
		byName[u.Budget] = u
	}
	// The refused bash call was not left counted in the wide budget.
	if byName["wide"].Calls != 3 || byName["bash-only"].Calls != 1 {
		t.Fatalf("usage = %+v", byName)
	}
}

func TestMiddlewareRefusesAndPublishesTheEvent(t *testing.T) {
	e := newEnv(t)
	b := policy.Budget{Name: "tiny", Scope: policy.ScopeAgent, MaxCalls: 1, Per: time.Hour}
	en := e.enforcer("w", 0, b)
	_, js := e.s.Connect(t)
	ctx := ctxT(t)
	cons, err := js.CreateOrUpdateConsumer(ctx, bus.StreamEvents, jetstream.ConsumerConfig{FilterSubject: "toolgate.event.budget.>"})
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	h := en.Middleware()(tools.HandlerFunc(func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
		ran++
		return &tools.Output{Content: "ran"}, nil
	}))
	for i := range 2 {
		_, err := h.Handle(ctx, &tools.Call{ID: fmt.Sprintf("m%d", i), Agent: "fay", Name: "read", Tool: &tools.Tool{Name: "read"}})
		if want := i == 1; errors.Is(err, tools.ErrBudgetExceeded) != want {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if ran != 1 {
		t.Fatalf("the tool ran %d times, want 1", ran)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatalf("no budget event: %v", err)
	}
	if msg.Subject() != "toolgate.event.budget.fay" || msg.Headers().Get("ce-type") != "dev.toolgate.budget.exceeded.v1" {
		t.Fatalf("event %s %v", msg.Subject(), msg.Headers())
	}
	if !strings.Contains(string(msg.Data()), `"budget":"tiny"`) || !strings.Contains(string(msg.Data()), `"resets_at"`) {
		t.Fatalf("event data %s", msg.Data())
	}
}

// TestCorruptCounterIsRebuiltFromTheCharges: a counter record that is not
// one an enforcer wrote - garbage, an empty object that would reset it,
// a negative count, a field no enforcer writes - is neither trusted nor a
// permanent refusal: the next charge rebuilds it from the execution
// audit events of the window that a trusted worker signed, and counts on
// from there.
func TestCorruptCounterIsRebuiltFromTheCharges(t *testing.T) {
	tests := []struct {
		name, record string
	}{
		{"garbage", `not json`},
		{"empty object", `{}`},
		{"negative calls", `{"budget":"b","scope":"agent","agent":"ann","calls":-100,"time_ms":0,"updated":"2026-01-01T00:00:00Z"}`},
		{"unknown field", `{"budget":"b","scope":"agent","agent":"ann","calls":0,"time_ms":0,"updated":"2026-01-01T00:00:00Z","reset":true}`},
		{"trailing data", `{"budget":"b","scope":"agent","agent":"ann","calls":0,"time_ms":0,"updated":"2026-01-01T00:00:00Z"} {}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			b := policy.Budget{Name: "b", Scope: policy.ScopeAgent, MaxCalls: 3, Per: time.Hour}
			en := e.enforcer("w1", time.Minute, b)
			signer, verifier, _ := testenv.WorkerSigning(t)
			en.cfg.Audit = verifier
			ctx := context.Background()
			// An audit event no worker signed is no charge.
			forged, err := events.NewMessage(events.AuditSubject("ann", "read"), "ann.x:audit", "toolgate://worker/w1",
				events.TypeCallAudited, events.AuditData{Kind: events.AuditExecution, CallID: "x", Agent: "ann",
					Tool: "read", Status: events.StatusOK, Time: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := en.js.PublishMsg(ctx, forged); err != nil {
				t.Fatal(err)
			}
			// Two calls ran and were audited.
			for i := range 2 {
				ch, err := en.Charge(ctx, Use{CallID: fmt.Sprintf("c%d", i), Agent: "ann", Tool: "read"})
				if err != nil {
					t.Fatal(err)
				}
				ch.Release(ctx)
				m, err := events.EncodeData(events.AuditSubject("ann", "read"), events.Attrs{ID: fmt.Sprintf("ann.c%d:audit", i),
					Source: "toolgate://worker/w1", Type: events.TypeCallAudited, Sign: eventsig.Sign(signer)},
					events.AuditData{Kind: events.AuditExecution, CallID: fmt.Sprintf("c%d", i), Agent: "ann",
						Tool: "read", Status: events.StatusOK, DurationMS: 5, Time: time.Now()}, events.Binary)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := en.js.PublishMsg(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := en.kv.Put(ctx, "b.ann", []byte(tt.record)); err != nil {
				t.Fatal(err)
			}
			if _, err := List(ctx, en.kv, Filter{}); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("List over a corrupt counter: %v", err)
			}
			// The third call is the last the budget allows: rebuilt, the
			// counter says 2, not 0 (trusted) nor spent (a refusal).
			if _, err := en.Charge(ctx, Use{CallID: "c2", Agent: "ann", Tool: "read"}); err != nil {
				t.Fatalf("charge over a corrupt counter: %v", err)
			}
			var ex *ExceededError
			if _, err := en.Charge(ctx, Use{CallID: "c3", Agent: "ann", Tool: "read"}); !errors.As(err, &ex) || ex.Used != 3 {
				t.Fatalf("the fourth call: %v", err)
			}
		})
	}
}

// TestRebuiltCounterCountsResultsAheadOfTheirAudit: a worker stores a
// call's signed result first and its execution audit event right after,
// so a counter corrupted in between would be rebuilt without that call.
// The rebuild counts a signed result whose audit event is not stored yet,
// once (not again when both are), and never an unsigned one.
func TestRebuiltCounterCountsResultsAheadOfTheirAudit(t *testing.T) {
	e := newEnv(t)
	b := policy.Budget{Name: "b", Scope: policy.ScopeAgent, MaxCalls: 4, Per: time.Hour}
	en := e.enforcer("w1", time.Minute, b)
	signer, verifier, _ := testenv.WorkerSigning(t)
	en.cfg.Audit = verifier
	ctx := context.Background()
	publish := func(m *nats.Msg, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := en.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	result := func(call string, sign events.SignFunc) {
		publish(events.EncodeData(events.ResultSubject("ann", call), events.Attrs{ID: events.AgentKey("ann", call) + ":result",
			Source: "toolgate://worker/w1", Type: events.TypeCallCompleted, Subject: call, Sign: sign},
			events.ResultData{CallID: call, Agent: "ann", Tool: "read", Status: events.StatusOK, DurationMS: 5}, events.Binary))
	}
	for i, call := range []string{"both", "result-only", "forged"} {
		ch, err := en.Charge(ctx, Use{CallID: call, Agent: "ann", Tool: "read"})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		ch.Release(ctx)
	}
	result("both", eventsig.Sign(signer))
	publish(events.EncodeData(events.AuditSubject("ann", "read"), events.Attrs{ID: events.AgentKey("ann", "both") + ":audit",
		Source: "toolgate://worker/w1", Type: events.TypeCallAudited, Sign: eventsig.Sign(signer)},
		events.AuditData{Kind: events.AuditExecution, CallID: "both", Agent: "ann", Tool: "read", Status: events.StatusOK,
			DurationMS: 5, Time: time.Now()}, events.Binary))
	result("result-only", eventsig.Sign(signer))
	result("forged", nil)
	if _, err := en.kv.Put(ctx, "b.ann", []byte(`garbage`)); err != nil {
		t.Fatal(err)
	}
	// Rebuilt, the counter says 2 ("both" once, "result-only"): two more
	// calls run, the fifth is refused.
	for _, call := range []string{"c3", "c4"} {
		if _, err := en.Charge(ctx, Use{CallID: call, Agent: "ann", Tool: "read"}); err != nil {
			t.Fatalf("charge %s over a corrupt counter: %v", call, err)
		}
	}
	var ex *ExceededError
	if _, err := en.Charge(ctx, Use{CallID: "c5", Agent: "ann", Tool: "read"}); !errors.As(err, &ex) || ex.Used != 4 {
		t.Fatalf("the fifth call: %v", err)
	}
}
