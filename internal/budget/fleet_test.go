package budget

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// recorder is a real tool that records its executions and how many run
// at once, across every worker of the test.
type recorder struct {
	runs    atomic.Int64
	now     atomic.Int64
	most    atomic.Int64
	perCall sync.Map // call id → *atomic.Int64
	started chan string
	hold    time.Duration
	block   bool // run until cancelled
}

func (r *recorder) tool() *tools.Tool {
	return &tools.Tool{Name: "work", Description: "records that it ran", Kind: policy.KindOther, MaxTimeout: time.Minute,
		Handler: tools.HandlerFunc(func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
			r.runs.Add(1)
			n, _ := r.perCall.LoadOrStore(c.ID, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			cur := r.now.Add(1)
			defer r.now.Add(-1)
			for {
				m := r.most.Load()
				if cur <= m || r.most.CompareAndSwap(m, cur) {
					break
				}
			}
			if r.started != nil {
				r.started <- c.ID
			}
			if r.block {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			select {
			case <-time.After(r.hold):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &tools.Output{Content: "done"}, nil
		})}
}

// startWorker runs a real worker on its own connection whose pipeline
// enforces budgets, until the test ends or stop is called.
func (e *env) startWorker(name string, r *recorder, cfg worker.Config, budgets ...policy.Budget) (stop func()) {
	t := e.t
	t.Helper()
	nc, js := e.s.Connect(t)
	en, err := New(context.Background(), js, Config{Worker: name, Lease: 2 * time.Second, Logger: quiet(),
		Budgets: func() []policy.Budget { return budgets }})
	if err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	reg.MustRegister(r.tool())
	cfg.Name, cfg.Logger = name, quiet()
	cfg.Signer, cfg.Verifier, _ = testenv.WorkerSigning(t)
	w, err := worker.New(nc, tools.NewPipeline(reg, tools.Use(en.Middleware())), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	w.OnReady(func() { close(ready) })
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	go en.Run(ctx)
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("worker not ready")
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func (e *env) client(agent string) (*client.Client, *nats.Conn) {
	nc, _ := e.s.Connect(e.t)
	c, err := client.New(nc, agent)
	if err != nil {
		e.t.Fatal(err)
	}
	return c, nc
}

// callAll makes n calls at once and returns their results.
func callAll(t *testing.T, c *client.Client, n int, session string) []*events.ResultData {
	t.Helper()
	ctx := ctxT(t)
	out := make([]*events.ResultData, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.Call(ctx, "work", nil, client.WithID(fmt.Sprintf("call-%d", i)), client.WithSession(session))
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			out[i] = r
		}()
	}
	wg.Wait()
	return out
}

func TestTwoWorkersRunExactlyTheBudgetedCalls(t *testing.T) {
	e := newEnv(t)
	b := policy.Budget{Name: "per-session", Scope: policy.ScopeSession, MaxCalls: 5, Per: time.Hour}
	r := &recorder{}
	e.startWorker("w1", r, worker.Config{Concurrency: 4}, b)
	e.startWorker("w2", r, worker.Config{Concurrency: 4}, b)
	c, _ := e.client("alice")
	results := callAll(t, c, 23, "s1")
	var ok, refused int
	for i, res := range results {
		switch {
		case res == nil:
		case res.Status == events.StatusOK:
			ok++
		case res.Status == events.StatusError && res.Error == events.CodeBudgetExceeded:
			refused++
			if res.Metadata["budget"] != "per-session" || res.Metadata["resets_at"] == nil {
				t.Errorf("refusal %d: %+v", i, res)
			}
		default:
			t.Errorf("call %d: %+v", i, res)
		}
	}
	if ok != 5 || refused != 18 || r.runs.Load() != 5 {
		t.Fatalf("ok %d, refused %d, executions %d; want 5, 18, 5", ok, refused, r.runs.Load())
	}
	us := e.usage(Filter{Agent: "alice", Session: "s1"})
	if len(us) != 1 || us[0].Calls != 5 || len(us[0].Running) != 0 {
		t.Fatalf("usage = %+v", us)
	}
}

func TestConcurrencyLimitHoldsUnderLoad(t *testing.T) {
	e := newEnv(t)
	b := policy.Budget{Name: "three", Scope: policy.ScopeAgent, MaxConcurrent: 3}
	r := &recorder{hold: 150 * time.Millisecond}
	e.startWorker("w1", r, worker.Config{Concurrency: 8}, b)
	e.startWorker("w2", r, worker.Config{Concurrency: 8}, b)
	c, _ := e.client("bob")
	results := callAll(t, c, 40, "")
	var ok, refused int
	for _, res := range results {
		switch {
		case res == nil:
		case res.Status == events.StatusOK:
			ok++
		case res.Error == events.CodeBudgetExceeded && res.Metadata["limit"] == LimitConcurrent:
			refused++
		default:
			t.Errorf("unexpected result %+v", res)
		}
	}
	if r.most.Load() > 3 {
		t.Fatalf("%d calls ran at once; the budget allows 3", r.most.Load())
	}
	if ok < 3 || ok+refused != 40 || r.runs.Load() != int64(ok) {
		t.Fatalf("ok %d, refused %d, executions %d", ok, refused, r.runs.Load())
	}
	us := e.usage(Filter{Agent: "bob"})
	if len(us) != 1 || len(us[0].Running) != 0 || us[0].Calls != int64(ok) {
		t.Fatalf("usage = %+v", us)
	}
}

func TestRedeliveryDoesNotChargeTwice(t *testing.T) {
	e := newEnv(t)
	b := policy.Budget{Name: "life", Scope: policy.ScopeAgent, MaxCalls: 10}
	fast := worker.Config{Concurrency: 2, ShutdownGrace: time.Second, Bus: bus.Config{AckWait: 2 * time.Second, MaxDeliver: 5}}
	// The first worker takes the call and dies while running it: its
	// connection goes, the call's message is never acked.
	dying := &recorder{block: true, started: make(chan string, 1)}
	nc, js := e.s.Connect(t)
	en, err := New(context.Background(), js, Config{Worker: "dying", Lease: 2 * time.Second, Logger: quiet(),
		Budgets: func() []policy.Budget { return []policy.Budget{b} }})
	if err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	reg.MustRegister(dying.tool())
	fast.Name, fast.Logger = "dying", quiet()
	fast.Signer, fast.Verifier, _ = testenv.WorkerSigning(t)
	w, err := worker.New(nc, tools.NewPipeline(reg, tools.Use(en.Middleware())), fast)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); testenv.Recv(t, done, "done") })

	c, _ := e.client("carol")
	id, err := c.Submit(ctxT(t), "work", nil)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Recv(t, dying.started, "dying.started")
	nc.Close()

	// Another worker gets the redelivery.
	r := &recorder{}
	e.startWorker("survivor", r, fast, b)
	res, err := c.Wait(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != events.StatusInterrupted || r.runs.Load() != 0 {
		t.Fatalf("redelivered call: %+v, ran %d times on the survivor", res, r.runs.Load())
	}
	us := e.usage(Filter{Agent: "carol"})
	if len(us) != 1 || us[0].Calls != 1 {
		b, _ := json.Marshal(us)
		t.Fatalf("the redelivered call was charged again: %s", b)
	}
}

func TestCallNeverRunsPastTheTimeLeft(t *testing.T) {
	e := newEnv(t)
	b := policy.Budget{Name: "second", Scope: policy.ScopeAgent, MaxTime: time.Second, Per: 24 * time.Hour}
	r := &recorder{block: true} // runs until its context ends
	e.startWorker("w1", r, worker.Config{}, b)
	c, _ := e.client("dora")
	ctx := ctxT(t)
	res, err := c.Call(ctx, "work", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The tool would run for ever: the budget's second stopped it.
	if res.Status != events.StatusTimeout || r.runs.Load() != 1 {
		t.Fatalf("first call: %+v", res)
	}
	res, err = c.Call(ctx, "work", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Error != events.CodeBudgetExceeded || res.Metadata["limit"] != LimitTime || r.runs.Load() != 1 {
		t.Fatalf("second call: %+v", res)
	}
}
