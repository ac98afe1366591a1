package delegate_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/delegate"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/builtin"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type fleet struct {
	srv  *testenv.Server
	ws   string
	stop func() error
}

// startWorker runs a real worker with the built-in file tools and the task
// tool over a fresh workspace, on a real NATS server that outlives it.
func startWorker(t *testing.T, grace time.Duration, after ...tools.Middleware) *fleet {
	t.Helper()
	srv := testenv.StartNATS(t, "")
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("alpha\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	nc, js := srv.Connect(t)
	ctx := context.Background()
	if err := bus.Provision(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	if err := builtin.Register(reg, builtin.Config{Workspace: ws}); err != nil {
		t.Fatal(err)
	}
	d, err := delegate.New(ctx, nc, js, delegate.Config{Worker: "w1", Registry: reg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(d.Tool())
	mws := append([]tools.Middleware{d.Middleware}, after...)
	w, err := worker.New(nc, tools.NewPipeline(reg, tools.Use(mws...)), signed(t, worker.Config{Name: "w1", Logger: quiet, ShutdownGrace: grace}))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	ready, done := make(chan struct{}), make(chan error, 1)
	w.OnReady(func() { close(ready) })
	go func() { done <- w.Run(wctx) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("worker: %v", err)
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return testenv.Recv(t, done, "done")
	}
	t.Cleanup(func() { _ = stop() })
	return &fleet{srv: srv, ws: ws, stop: stop}
}

func (f *fleet) client(t *testing.T, agent string) *client.Client {
	t.Helper()
	nc, _ := f.srv.Connect(t)
	c, err := client.New(nc, agent)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Cancelling the parent's call reaches the sub-task: here the worker
// running the task call shuts down (its grace over, running calls are
// interrupted), and the helper's context ends with the cancellation
// announced to it, long before the task's own deadline. The task's
// record is over: a later call for it is refused by any worker.
func TestParentCancellationReachesSubTask(t *testing.T) {
	f := startWorker(t, 100*time.Millisecond)
	lead, helper := f.client(t, "lead"), f.client(t, "helper")
	started := make(chan string, 1)
	ended := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- helper.ServeTasks(ctx, func(ctx context.Context, task *client.Task) (*client.TaskAnswer, error) {
			started <- task.TaskID
			<-ctx.Done()
			ended <- context.Cause(ctx)
			return nil, ctx.Err()
		})
	}()
	defer func() {
		cancel()
		if err := testenv.Recv(t, served, "served"); err != nil {
			t.Errorf("ServeTasks: %v", err)
		}
	}()
	callID, err := lead.Submit(context.Background(), "task", map[string]any{"agent": "helper", "prompt": "work long", "timeout": 3_600_000})
	if err != nil {
		t.Fatal(err)
	}
	taskID := testenv.Recv(t, started, "started")
	if taskID == callID {
		t.Fatalf("the task id is the parent's call id %s: the sub-agent learns it", callID)
	}
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	cause := testenv.Recv(t, ended, "ended")
	if !errors.Is(cause, client.ErrTaskCancelled) || !strings.Contains(cause.Error(), "parent call was cancelled") {
		t.Fatalf("helper's context ended with %v, want the parent's cancellation", cause)
	}
	// Another worker (stored results come through one) refuses the
	// task's calls now.
	startOn(t, f)
	r, err := lead.Wait(context.Background(), callID)
	if err != nil || r.Status != events.StatusInterrupted {
		t.Fatalf("task call: %v %+v, want interrupted", err, r)
	}
	sub, err := helper.Call(context.Background(), "read", map[string]any{"path": "notes.txt"}, client.WithParent(taskID))
	if err != nil || sub.Status != events.StatusDenied || sub.Decision.Rule != delegate.RuleNoTask {
		t.Fatalf("a call for the cancelled task: %v %+v", err, sub)
	}
}

// startOn starts a second worker on f's server and workspace.
func startOn(t *testing.T, f *fleet) {
	t.Helper()
	nc, js := f.srv.Connect(t)
	reg := tools.NewRegistry()
	if err := builtin.Register(reg, builtin.Config{Workspace: f.ws}); err != nil {
		t.Fatal(err)
	}
	d, err := delegate.New(context.Background(), nc, js, delegate.Config{Worker: "w2", Registry: reg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(d.Tool())
	w, err := worker.New(nc, tools.NewPipeline(reg, tools.Use(d.Middleware)), signed(t, worker.Config{Name: "w2", Logger: quiet}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	w.OnReady(func() { close(ready) })
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); testenv.Recv(t, done, "done") })
	testenv.Recv(t, ready, "ready")
}

// The task tool's arguments: allowed tools resolved to canonical names,
// and the refusals, each saying what is wrong.
func TestTaskArguments(t *testing.T) {
	f := startWorker(t, 0)
	lead := f.client(t, "lead")
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"self", map[string]any{"agent": "lead", "prompt": "x"}, "cannot delegate to itself"},
		{"unknown tool", map[string]any{"agent": "helper", "prompt": "x", "allowed_tools": []string{"reed"}}, `unknown tool "reed"`},
		{"empty list", map[string]any{"agent": "helper", "prompt": "x", "allowed_tools": []string{}}, "allowed_tools: empty"},
		{"bad agent", map[string]any{"agent": "a.b", "prompt": "x"}, "agent"},
		{"no prompt", map[string]any{"agent": "helper"}, "prompt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := lead.Call(context.Background(), "task", tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != events.StatusError || !strings.Contains(r.Output, tc.want) {
				t.Errorf("%s %q, want an error naming %q", r.Status, r.Output, tc.want)
			}
		})
	}
}

// A sub-agent that delegates further hands on no more than its own task
// allows: the nested task's record holds the intersection and the root's
// budget key.
func TestNestedTaskNarrowsAllowedTools(t *testing.T) {
	f := startWorker(t, 0)
	lead, helper, deep := f.client(t, "lead"), f.client(t, "helper"), f.client(t, "deep")
	nested := make(chan *events.ResultData, 1)
	denied := make(chan *events.ResultData, 1)
	serve := func(c *client.Client, h client.TaskHandler) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.ServeTasks(ctx, h) }()
		t.Cleanup(func() { cancel(); testenv.Recv(t, done, "done") })
	}
	serve(helper, func(ctx context.Context, task *client.Task) (*client.TaskAnswer, error) {
		r, err := task.Call(ctx, "task", map[string]any{"agent": "deep", "prompt": "edit", "allowed_tools": []string{"read", "edit"}})
		if err != nil {
			return nil, err
		}
		nested <- r
		return &client.TaskAnswer{Summary: "delegated"}, nil
	})
	serve(deep, func(ctx context.Context, task *client.Task) (*client.TaskAnswer, error) {
		r, err := task.Call(ctx, "edit", map[string]any{"path": "notes.txt", "old_string": "alpha", "new_string": "omega"})
		if err != nil {
			return nil, err
		}
		denied <- r
		return &client.TaskAnswer{Summary: "tried"}, nil
	})
	r, err := lead.Call(context.Background(), "task", map[string]any{"agent": "helper", "prompt": "look", "allowed_tools": []string{"read", "task"}},
		client.WithSession("root-session"))
	if err != nil || r.Status != events.StatusOK {
		t.Fatalf("task: %v %+v", err, r)
	}
	if d := testenv.Recv(t, denied, "denied"); d.Status != events.StatusDenied || d.Decision.Rule != delegate.RuleAllowedTools {
		t.Errorf("nested edit: %s %+v", d.Status, d.Decision)
	}
	if n := testenv.Recv(t, nested, "nested"); n.Status != events.StatusOK || n.ParentCallID != r.CallID || n.SessionID != "root-session" {
		t.Errorf("nested task call: %+v", n)
	}
	b, _ := os.ReadFile(filepath.Join(f.ws, "notes.txt"))
	if string(b) != "alpha\n" {
		t.Errorf("notes.txt = %q", b)
	}
}

// The record's budget key is the root of the delegation chain, and a
// middleware after delegation's (where budgets go) sees it on every call
// made for a task, nested or not, as tools.Call.Parent.
func TestRecordBudgetKeyIsTheRoot(t *testing.T) {
	parents := make(chan tools.Parent, 4)
	budgetHook := func(next tools.Handler) tools.Handler {
		return tools.HandlerFunc(func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
			if c.Parent != nil {
				parents <- *c.Parent
			}
			return next.Handle(ctx, c)
		})
	}
	f := startWorker(t, 0, budgetHook)
	lead, helper, deep := f.client(t, "lead"), f.client(t, "helper"), f.client(t, "deep")
	_, js := f.srv.Connect(t)
	kv, err := js.KeyValue(context.Background(), bus.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	deepTask := make(chan string, 1)
	for c, h := range map[*client.Client]client.TaskHandler{
		helper: func(ctx context.Context, task *client.Task) (*client.TaskAnswer, error) {
			_, err := task.Call(ctx, "task", map[string]any{"agent": "deep", "prompt": "p"})
			return &client.TaskAnswer{}, err
		},
		deep: func(ctx context.Context, task *client.Task) (*client.TaskAnswer, error) {
			deepTask <- task.TaskID
			return &client.TaskAnswer{}, nil
		},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.ServeTasks(ctx, h) }()
		t.Cleanup(func() { cancel(); testenv.Recv(t, done, "done") })
	}
	if r, err := lead.Call(context.Background(), "task", map[string]any{"agent": "helper", "prompt": "p"}, client.WithSession("s0")); err != nil || r.Status != events.StatusOK {
		t.Fatalf("task: %v %+v", err, r)
	}
	e, err := kv.Get(context.Background(), bus.AgentKey("deep", testenv.Recv(t, deepTask, "deepTask")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(e.Value()), `"budget_agent":"lead","budget_session":"s0"`) ||
		!strings.Contains(string(e.Value()), `"parent_agent":"helper"`) {
		t.Errorf("nested record %s", e.Value())
	}
	// helper's task call (made for lead's task) reached the hook with the
	// root's key.
	select {
	case p := <-parents:
		if p.BudgetAgent != "lead" || p.BudgetSession != "s0" || p.Agent != "lead" {
			t.Errorf("parent seen by the budget hook: %+v", p)
		}
	default:
		t.Error("no call for a task reached the middleware after delegation's")
	}
}

// An agent that stops serving in the middle of a task hands it back: the
// task is done by the agent's next start, and the parent gets that
// answer.
func TestTaskSurvivesTheAgentRestarting(t *testing.T) {
	f := startWorker(t, 0)
	lead, first, second := f.client(t, "lead"), f.client(t, "helper"), f.client(t, "helper")
	started := make(chan struct{})
	ctx, stopFirst := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- first.ServeTasks(ctx, func(ctx context.Context, task *client.Task) (*client.TaskAnswer, error) {
			close(started)
			<-ctx.Done()
			return nil, ctx.Err()
		})
	}()
	id, err := lead.Submit(context.Background(), "task", map[string]any{"agent": "helper", "prompt": "p"})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Recv(t, started, "started")
	stopFirst()
	if err := testenv.Recv(t, served, "served"); err != nil {
		t.Fatalf("first ServeTasks: %v", err)
	}
	ctx2, stopSecond := context.WithCancel(context.Background())
	served2 := make(chan error, 1)
	go func() {
		served2 <- second.ServeTasks(ctx2, func(ctx context.Context, task *client.Task) (*client.TaskAnswer, error) {
			return &client.TaskAnswer{Summary: "done on the second start"}, nil
		})
	}()
	defer func() {
		stopSecond()
		if err := testenv.Recv(t, served2, "served2"); err != nil {
			t.Errorf("second ServeTasks: %v", err)
		}
	}()
	r, err := lead.Wait(context.Background(), id)
	if err != nil || r.Status != events.StatusOK || !strings.Contains(r.Output, "done on the second start") {
		t.Fatalf("task: %v %+v", err, r)
	}
}

// Calls made for one task at once all count in its record: the workers
// running them update it concurrently, and every update lands.
func TestConcurrentTaskCallsAllCounted(t *testing.T) {
	f := startWorker(t, 0)
	lead, helper := f.client(t, "lead"), f.client(t, "helper")
	const n = 8
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- helper.ServeTasks(ctx, func(ctx context.Context, task *client.Task) (*client.TaskAnswer, error) {
			errs := make(chan error, n)
			for range n {
				go func() {
					r, err := task.Call(ctx, "read", map[string]any{"path": "notes.txt"})
					if err == nil && r.Status != events.StatusOK {
						err = errors.New(r.Output)
					}
					errs <- err
				}()
			}
			for range n {
				if err := <-errs; err != nil {
					return nil, err
				}
			}
			return &client.TaskAnswer{Summary: "read"}, nil
		})
	}()
	t.Cleanup(func() { cancel(); testenv.Recv(t, done, "done") })
	r, err := lead.Call(context.Background(), "task", map[string]any{"agent": "helper", "prompt": "read it"})
	if err != nil || r.Status != events.StatusOK {
		t.Fatalf("task: %v %+v", err, r)
	}
	if want := fmt.Sprintf("tool calls: %d,", n); !strings.Contains(r.Output, want) {
		t.Errorf("task output %q lacks %q", r.Output, want)
	}
}

// signed gives a worker the tests' worker key, as the daemon gives it its
// credentials': clients take only signed results.
func signed(t testing.TB, cfg worker.Config) worker.Config {
	cfg.Signer, cfg.Verifier, _ = testenv.WorkerSigning(t)
	return cfg
}
