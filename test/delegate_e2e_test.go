package test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/delegate"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

const delegatePolicy = `version: 1
default: deny
tools:
  read: allow
  write: allow
  edit: allow
  task: allow
`

// startDelegation starts a worker process whose policy allows the file
// tools and task, over a workspace holding notes.txt.
func startDelegation(t *testing.T, mod func(*daemon.Options)) *process {
	t.Helper()
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, "notes.txt"), "alpha\nbeta\n")
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, delegatePolicy)
	return startProcess(t, ws, func(o *daemon.Options) {
		o.PolicyFile = pol
		if mod != nil {
			mod(o)
		}
	})
}

// serve runs helper's task handler until the test ends.
func serve(t *testing.T, helper *client.Client, h client.TaskHandler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- helper.ServeTasks(ctx, h) }()
	t.Cleanup(func() {
		cancel()
		if err := testenv.Recv(t, done, "done"); err != nil {
			t.Errorf("ServeTasks: %v", err)
		}
	})
}

func taskResult(t *testing.T, r *events.ResultData) events.TaskResultData {
	t.Helper()
	b, err := json.Marshal(r.Metadata["task"])
	if err != nil {
		t.Fatal(err)
	}
	var tr events.TaskResultData
	if err := json.Unmarshal(b, &tr); err != nil || tr.TaskID == "" {
		t.Fatalf("result has no task metadata (%v): %+v", err, r)
	}
	return tr
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The parent hands a task to a helper, which reads and edits a file
// through toolgate; the parent gets the helper's summary and, from the
// worker's record, the file modified and the calls made, and sees the
// helper's progress. The helper's calls carry the parent's call id and
// session.
func TestDelegateTaskReadEdit(t *testing.T) {
	p := startDelegation(t, nil)
	lead, helper := p.client(t, "lead"), p.client(t, "helper")
	subCalls := make(chan *events.ResultData, 4)
	serve(t, helper, func(ctx context.Context, task *client.Task) (*client.TaskAnswer, error) {
		r, err := task.Call(ctx, "read", map[string]any{"path": "notes.txt"})
		if err != nil {
			return nil, err
		}
		subCalls <- r
		_ = task.Progress("read notes.txt, editing")
		// A call under the handler's context is the task's call too.
		r, err = helper.Call(ctx, "edit", map[string]any{"path": "notes.txt", "old_string": "beta", "new_string": "gamma"})
		if err != nil {
			return nil, err
		}
		subCalls <- r
		return &client.TaskAnswer{Summary: "replaced beta with gamma in notes.txt"}, nil
	})
	var progress []string
	res, err := lead.Call(ctxT(t), "task", map[string]any{
		"agent": "helper", "prompt": "replace beta with gamma in notes.txt", "expected_outcome": "notes.txt says gamma",
		"allowed_tools": []string{"read_file", "edit"},
	}, client.WithID("lead-task-1"), client.WithSession("s-lead"),
		client.OnProgress(func(pd events.ProgressData) { progress = append(progress, pd.Chunk) }))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != events.StatusOK {
		t.Fatalf("task: %s %s", res.Status, res.Output)
	}
	tr := taskResult(t, res)
	if tr.ToolCallCount != 2 || !slices.Equal(tr.FilesModified, []string{"notes.txt"}) || len(tr.Errors) != 0 {
		t.Errorf("task result: %+v, want 2 calls, notes.txt modified, no errors", tr)
	}
	if tr.Summary != "replaced beta with gamma in notes.txt" || !strings.Contains(res.Output, "replaced beta with gamma") {
		t.Errorf("summary %q, output %q", tr.Summary, res.Output)
	}
	if got := readFile(t, filepath.Join(p.ws, "notes.txt")); got != "alpha\ngamma\n" {
		t.Errorf("notes.txt = %q", got)
	}
	if !slices.ContainsFunc(progress, func(s string) bool { return strings.Contains(s, "read notes.txt, editing") }) {
		t.Errorf("the helper's progress did not reach the parent: %q", progress)
	}
	var sub []string
	for range 2 {
		r := testenv.Recv(t, subCalls, "subCalls")
		sub = append(sub, r.CallID)
		if r.ParentCallID != "lead-task-1" || r.SessionID != "s-lead" || r.Status != events.StatusOK {
			t.Errorf("sub-call %s %s: parent %q session %q status %s", r.Tool, r.CallID, r.ParentCallID, r.SessionID, r.Status)
		}
	}
	// toolctl session shows the task call with the helper's calls below
	// it, from the audit and results streams (audit events are published
	// asynchronously: wait until all three are there).
	want := []string{
		"session s-lead: 3 calls, 1 task",
		"lead/task lead-task-1  ok  ",
		"[ok: 2 tool calls, modified notes.txt]  replaced beta with gamma in notes.txt",
		"├─ helper/read " + sub[0] + "  ok  ",
		"└─ helper/edit " + sub[1] + "  ok  ",
	}
	var out string
	for range 200 {
		var code int
		out, _, code = p.toolctl(t, "session", "s-lead")
		if code == 0 && strings.Contains(out, "3 calls") {
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("toolctl session s-lead lacks %q:\n%s", w, out)
		}
	}
}

// A sub-agent's call of a tool its task does not allow is denied by the
// worker from the task record: the file stays as it was. The parent's
// result lists the denial; the allowed read counts.
func TestDelegateDisallowedToolDenied(t *testing.T) {
	p := startDelegation(t, nil)
	lead, helper := p.client(t, "lead"), p.client(t, "helper")
	denied := make(chan *events.ResultData, 1)
	serve(t, helper, func(ctx context.Context, task *client.Task) (*client.TaskAnswer, error) {
		if _, err := task.Call(ctx, "read", map[string]any{"path": "notes.txt"}); err != nil {
			return nil, err
		}
		r, err := task.Call(ctx, "edit", map[string]any{"path": "notes.txt", "old_string": "beta", "new_string": "pwned"})
		if err != nil {
			return nil, err
		}
		denied <- r
		return &client.TaskAnswer{Summary: "could not edit", Failed: true}, nil
	})
	res, err := lead.Call(ctxT(t), "task", map[string]any{"agent": "helper", "prompt": "look only", "allowed_tools": []string{"read"}})
	if err != nil {
		t.Fatal(err)
	}
	r := testenv.Recv(t, denied, "denied")
	if r.Status != events.StatusDenied || r.Decision == nil || r.Decision.Rule != delegate.RuleAllowedTools || r.ParentCallID != res.CallID {
		t.Fatalf("edit outside allowed_tools: %s %+v %s (parent %q)", r.Status, r.Decision, r.Output, r.ParentCallID)
	}
	if got := readFile(t, filepath.Join(p.ws, "notes.txt")); got != "alpha\nbeta\n" {
		t.Fatalf("notes.txt changed to %q by a denied call", got)
	}
	if res.Status != events.StatusError {
		t.Errorf("parent status %s, want error (the helper failed)", res.Status)
	}
	tr := taskResult(t, res)
	if tr.ToolCallCount != 1 || len(tr.FilesModified) != 0 ||
		!slices.ContainsFunc(tr.Errors, func(e string) bool { return strings.Contains(e, "edit denied") }) {
		t.Errorf("task result %+v: want 1 call, nothing modified, the denial listed", tr)
	}
}

// A call naming a task that was not delegated to its agent, or a task id
// nobody delegated, is denied: the claim alone grants nothing.
func TestDelegateForeignParentDenied(t *testing.T) {
	p := startDelegation(t, nil)
	lead, helper, intruder := p.client(t, "lead"), p.client(t, "helper"), p.client(t, "intruder")
	stolen := make(chan *events.ResultData, 2)
	serve(t, helper, func(ctx context.Context, task *client.Task) (*client.TaskAnswer, error) {
		// While the task runs, another agent claims it.
		for _, parent := range []string{task.TaskID, "made-up-task"} {
			r, err := intruder.Call(ctx, "edit", map[string]any{"path": "notes.txt", "old_string": "beta", "new_string": "pwned"},
				client.WithParent(parent))
			if err != nil {
				return nil, err
			}
			stolen <- r
		}
		return &client.TaskAnswer{Summary: "done"}, nil
	})
	res, err := lead.Call(ctxT(t), "task", map[string]any{"agent": "helper", "prompt": "wait"})
	if err != nil || res.Status != events.StatusOK {
		t.Fatalf("task: %v %+v", err, res)
	}
	for range 2 {
		r := testenv.Recv(t, stolen, "stolen")
		if r.Status != events.StatusDenied || r.Decision == nil || r.Decision.Rule != delegate.RuleNoTask || r.ParentCallID != "" {
			t.Errorf("intruder's call %s: %s %+v, parent %q (an unconfirmed claim is not repeated)", r.CallID, r.Status, r.Decision, r.ParentCallID)
		}
	}
	if got := readFile(t, filepath.Join(p.ws, "notes.txt")); got != "alpha\nbeta\n" {
		t.Fatalf("notes.txt changed to %q", got)
	}
}

// A task not answered within its timeout ends the parent's call with
// status timeout, ends the helper's context, and refuses the task's
// later calls. The helper was away when the task was handed out: the
// task waited in the stream for it.
func TestDelegateTimeout(t *testing.T) {
	p := startDelegation(t, nil)
	lead, helper := p.client(t, "lead"), p.client(t, "helper")
	handed := make(chan struct{}, 1)
	type outcome struct {
		res *events.ResultData
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := lead.Call(ctxT(t), "task", map[string]any{"agent": "helper", "prompt": "never answer", "timeout": 3000},
			client.OnProgress(func(events.ProgressData) {
				select {
				case handed <- struct{}{}:
				default:
				}
			}))
		done <- outcome{r, err}
	}()
	testenv.Recv(t, handed, "handed") // the task is in the stream; the helper starts only now
	ended := make(chan error, 1)
	answered := make(chan struct{})
	late := make(chan *events.ResultData, 1)
	serve(t, helper, func(ctx context.Context, task *client.Task) (*client.TaskAnswer, error) {
		<-ctx.Done()
		ended <- context.Cause(ctx)
		// Once the parent has its timeout, the task is over everywhere.
		<-answered
		r, err := helper.Call(context.Background(), "read", map[string]any{"path": "notes.txt"}, client.WithParent(task.TaskID))
		if err == nil {
			late <- r
		}
		return nil, ctx.Err()
	})
	o := testenv.Recv(t, done, "done")
	close(answered)
	if o.err != nil || o.res.Status != events.StatusTimeout {
		t.Fatalf("task call: %v %+v, want status timeout", o.err, o.res)
	}
	if cause := testenv.Recv(t, ended, "ended"); !errors.Is(cause, client.ErrTaskCancelled) {
		t.Errorf("helper's context ended with %v", cause)
	}
	if r := testenv.Recv(t, late, "late"); r.Status != events.StatusDenied || r.Decision.Rule != delegate.RuleNoTask {
		t.Errorf("a call for a timed-out task: %s %+v", r.Status, r.Decision)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A sub-agent's calls for a task count against the budget of the agent
// and session that delegated it: lead's session budget of two reads is
// spent by helper's reads, and helper's third read is refused naming
// lead's budget. Helper's own reads outside the task are not counted.
func TestDelegateCountsAgainstTheParentsBudget(t *testing.T) {
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, "notes.txt"), "alpha\n")
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, "tools: {default: allow}\nbudgets:\n  two-reads:\n    scope: session\n    tools: [read]\n    max_calls: 2\n    per: 24h\n")
	p := startProcess(t, ws, func(o *daemon.Options) { o.PolicyFile = pol })
	lead, helper := p.client(t, "lead"), p.client(t, "helper")
	reads := make(chan *events.ResultData, 3)
	serve(t, helper, func(ctx context.Context, task *client.Task) (*client.TaskAnswer, error) {
		for range 3 {
			r, err := task.Call(ctx, "read", map[string]any{"path": "notes.txt"})
			if err != nil {
				return nil, err
			}
			reads <- r
		}
		return &client.TaskAnswer{Summary: "read three times"}, nil
	})
	if r, err := lead.Call(ctxT(t), "task", map[string]any{"agent": "helper", "prompt": "read"}, client.WithSession("s-lead")); err != nil || r.Status != events.StatusOK {
		t.Fatalf("task: %v %+v", err, r)
	}
	for i := range 3 {
		r := testenv.Recv(t, reads, "reads")
		if want := i < 2; (r.Status == events.StatusOK) != want {
			t.Fatalf("helper's read %d: %s %s", i, r.Status, r.Output)
		}
		if i == 2 && (r.Error != events.CodeBudgetExceeded || !strings.Contains(r.Output, `session "s-lead" of agent lead`)) {
			t.Errorf("refusal names %q", r.Output)
		}
	}
	// helper's own calls are its own.
	if r, err := helper.Call(ctxT(t), "read", map[string]any{"path": "notes.txt"}, client.WithSession("s-lead")); err != nil || r.Status != events.StatusOK {
		t.Fatalf("helper's own read: %v %+v", err, r)
	}
}

// Cancelling the parent's call (the Go client's context, which publishes
// toolgate.cancel) reaches the sub-task: the helper's context ends with
// the cancellation, and the task's later calls are refused.
func TestDelegateClientCancellationReachesSubTask(t *testing.T) {
	p := startDelegation(t, nil)
	lead, helper := p.client(t, "lead"), p.client(t, "helper")
	started := make(chan struct{})
	ended := make(chan error, 1)
	late := make(chan *events.ResultData, 1)
	serve(t, helper, func(ctx context.Context, task *client.Task) (*client.TaskAnswer, error) {
		close(started)
		<-ctx.Done()
		ended <- context.Cause(ctx)
		r, err := helper.Call(context.Background(), "read", map[string]any{"path": "notes.txt"}, client.WithParent(task.TaskID))
		if err == nil {
			late <- r
		}
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	called := make(chan error, 1)
	go func() {
		_, err := lead.Call(ctx, "task", map[string]any{"agent": "helper", "prompt": "work long", "timeout": 3_600_000}, client.WithID("lead-cancelled"))
		called <- err
	}()
	testenv.Recv(t, started, "started")
	cancel()
	if err := testenv.Recv(t, called, "called"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Call: %v", err)
	}
	if cause := testenv.Recv(t, ended, "ended"); !errors.Is(cause, client.ErrTaskCancelled) || !strings.Contains(cause.Error(), "cancelled") {
		t.Fatalf("helper's context ended with %v", cause)
	}
	if r := testenv.Recv(t, late, "late"); r.Status != events.StatusDenied || r.Decision == nil || r.Decision.Rule != delegate.RuleNoTask {
		t.Errorf("a call for the cancelled task: %s %+v", r.Status, r.Decision)
	}
	r, err := lead.Wait(ctxT(t), "lead-cancelled")
	if err != nil || r.Status != events.StatusCancelled {
		t.Errorf("task call: %v %+v, want cancelled", err, r)
	}
}
