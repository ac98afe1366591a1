package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/pkg/events"
)

// Task is a task another agent delegated to this one (the task tool).
// Calls made with Task.Call, or with Client.Call under the context the
// TaskHandler was given, carry the task's id as their parent call id and
// the parent's session: the worker holds them to the task's allowed tools
// and counts them for the parent.
type Task struct {
	events.TaskRequestData

	c     *Client
	calls atomic.Int64
	mu    sync.Mutex
	files []string
}

// Call makes a call for the task (see Client.Call).
func (t *Task) Call(ctx context.Context, tool string, args any, opts ...CallOption) (*events.ResultData, error) {
	return t.c.Call(withTask(ctx, t), tool, args, opts...)
}

// Progress tells the delegating agent how the task goes (best effort:
// core NATS, forwarded as the task call's progress).
func (t *Task) Progress(message string) error {
	m, err := events.EncodeData(events.TaskProgressSubject(t.c.agent, t.TaskID),
		events.Attrs{ID: fmt.Sprintf("%s:progress:%d", t.TaskID, time.Now().UnixNano()), Source: events.AgentSource(t.c.agent),
			Type: events.TypeTaskProgress, Subject: t.TaskID},
		events.TaskProgressData{TaskID: t.TaskID, Message: message}, events.Binary)
	if err != nil {
		return err
	}
	return t.c.nc.PublishMsg(m)
}

// ToolCalls is how many calls were made for the task through this client.
func (t *Task) ToolCalls() int { return int(t.calls.Load()) }

func (t *Task) called(r *events.ResultData) {
	t.calls.Add(1)
	if r == nil || r.Status != events.StatusOK {
		return
	}
	if p, ok := r.Metadata["path"].(string); ok && (r.Tool == "write" || r.Tool == "edit") {
		t.mu.Lock()
		defer t.mu.Unlock()
		if !slices.Contains(t.files, p) {
			t.files = append(t.files, p)
		}
	}
}

type taskKey struct{}

func withTask(ctx context.Context, t *Task) context.Context {
	return context.WithValue(ctx, taskKey{}, t)
}

// TaskFrom returns the task ctx was handed for, if any.
func TaskFrom(ctx context.Context) (*Task, bool) {
	t, ok := ctx.Value(taskKey{}).(*Task)
	return t, ok
}

// TaskAnswer is what a TaskHandler answers.
type TaskAnswer struct {
	// Summary is the answer for the delegating agent.
	Summary string
	// Errors lists what went wrong.
	Errors []string
	// Failed says the task could not be done.
	Failed bool
}

// TaskHandler does one task. ctx ends when the delegating call stops
// waiting (its timeout, its cancellation); the handler should return
// then. An error is answered as a failed task.
type TaskHandler func(ctx context.Context, t *Task) (*TaskAnswer, error)

// ServeOption configures ServeTasks.
type ServeOption func(*serveOpts)

type serveOpts struct {
	concurrency int
	log         *slog.Logger
}

// ServeConcurrency sets how many tasks run at once (default 4).
func ServeConcurrency(n int) ServeOption { return func(o *serveOpts) { o.concurrency = max(n, 1) } }

// ServeLogger sets the logger of ServeTasks (default slog.Default()).
func ServeLogger(l *slog.Logger) ServeOption { return func(o *serveOpts) { o.log = l } }

// ServeTasks takes the tasks delegated to this agent and runs h for
// each until ctx ends. Tasks wait in the tasks stream while the agent is
// away; a task still running when ctx ends is not answered but handed
// back to the stream, for the agent's next start. Each answer (the handler's, or a failure when it errs) is
// published on toolgate.task_result.<agent>.<task id>, and the task
// message acked only then; a cancellation from the delegating side ends
// the handler's context.
func (c *Client) ServeTasks(ctx context.Context, h TaskHandler, opts ...ServeOption) error {
	o := &serveOpts{concurrency: 4, log: slog.Default()}
	for _, f := range opts {
		f(o)
	}
	var (
		mu      sync.Mutex
		cancels = map[string]context.CancelCauseFunc{}
	)
	csub, err := c.nc.Subscribe(events.TaskCancelsOf(c.agent), func(m *nats.Msg) {
		var d events.TaskCancelData
		// Only a cancellation event of this very subject's task: inside
		// the agents account another agent can make an answer land here.
		if ev, err := events.DecodeData(m.Header, m.Data, &d); err != nil || ev.Type() != events.TypeTaskCancelled ||
			m.Subject != events.TaskCancelSubject(c.agent, d.TaskID) {
			return
		}
		mu.Lock()
		cancel := cancels[d.TaskID]
		mu.Unlock()
		if cancel != nil {
			cancel(fmt.Errorf("%w: %s", ErrTaskCancelled, d.Reason))
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe to task cancellations: %w", err)
	}
	defer csub.Unsubscribe()
	sem := make(chan struct{}, o.concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		msg, err := c.nextTask(ctx)
		if err != nil || msg == nil {
			<-sem
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				o.log.Warn("take tasks", "err", err)
				select { // a worker restarting: ask again shortly
				case <-time.After(time.Second):
				case <-ctx.Done():
					return nil
				}
			}
			continue
		}
		var req events.TaskRequestData
		if _, derr := events.DecodeData(msg.m.Header, msg.m.Data, &req); derr != nil || req.TaskID == "" ||
			msg.subject != events.TaskSubject(c.agent, req.TaskID) {
			o.log.Warn("task refused: not a task for this agent", "subject", msg.subject, "err", derr)
			_ = msg.ack("term")
			<-sem
			continue
		}
		tctx, cancel := context.WithCancelCause(ctx)
		mu.Lock()
		cancels[req.TaskID] = cancel
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer func() {
				mu.Lock()
				delete(cancels, req.TaskID)
				mu.Unlock()
				cancel(nil)
			}()
			c.runTask(ctx, tctx, msg, &Task{TaskRequestData: req, c: c}, h, o.log)
		}()
	}
}

// ErrTaskCancelled is the cause of a task handler's context ending
// because the delegating call stopped waiting.
var ErrTaskCancelled = errors.New("task cancelled by the delegating side")

func (c *Client) runTask(serving, ctx context.Context, msg *taskMsg, t *Task, h TaskHandler, log *slog.Logger) {
	start := time.Now()
	ctx, cancel := context.WithDeadlineCause(ctx, t.Deadline, fmt.Errorf("%w: its deadline passed", ErrTaskCancelled))
	defer cancel()
	// Keep the message while the task runs.
	alive := make(chan struct{})
	go func() {
		tk := time.NewTicker(15 * time.Second)
		defer tk.Stop()
		for {
			select {
			case <-tk.C:
				_ = msg.ack("wip")
			case <-alive:
				return
			}
		}
	}()
	var (
		ans *TaskAnswer
		err error
	)
	if ctx.Err() == nil {
		ans, err = h(withTask(ctx, t), t)
	}
	close(alive)
	if serving.Err() != nil && !errors.Is(context.Cause(ctx), ErrTaskCancelled) {
		// This agent stops serving: the task is not done, and not
		// failed either. It goes back to the stream for the next start.
		_ = msg.ack("nak")
		return
	}
	res := events.TaskResultData{TaskID: t.TaskID, Status: events.TaskOK, ToolCallCount: t.ToolCalls(),
		ExecutionTimeMS: max(time.Since(start).Milliseconds(), 0), Errors: []string{}, FilesModified: []string{}}
	t.mu.Lock()
	res.FilesModified = append(res.FilesModified, t.files...)
	t.mu.Unlock()
	if ans != nil {
		res.Summary = ans.Summary
		res.Errors = append(res.Errors, ans.Errors...)
		if ans.Failed {
			res.Status = events.TaskFailed
		}
	}
	switch {
	case context.Cause(ctx) != nil && errors.Is(context.Cause(ctx), ErrTaskCancelled):
		res.Status = events.TaskCancelled
		res.Errors = append(res.Errors, context.Cause(ctx).Error())
	case err != nil:
		res.Status = events.TaskFailed
		res.Errors = append(res.Errors, err.Error())
	}
	m, eerr := events.EncodeData(events.TaskResultSubject(c.agent, t.TaskID),
		events.Attrs{ID: t.TaskID + ":result", Source: events.AgentSource(c.agent), Type: events.TypeTaskCompleted, Subject: t.TaskID},
		res, events.Binary)
	if eerr == nil {
		pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, eerr = c.js.PublishMsg(pctx, m)
		pcancel()
	}
	if eerr != nil {
		log.Warn("task answer not published; the task will be delivered again", "task_id", t.TaskID, "err", eerr)
		_ = msg.ack("nak")
		return
	}
	if err := msg.ack("ack"); err != nil {
		log.Warn("task answered, not acknowledged: it may be delivered again", "task_id", t.TaskID, "err", err)
	}
}

// taskMsg is a task a worker handed over (events.TaskAPIPrefix).
type taskMsg struct {
	c       *Client
	m       *nats.Msg
	subject string // the subject the task was stored under
	ackRef  string // names the task message for ack, nak, wip, term
}

// taskWait is how long one next-task request asks a worker to wait.
const taskWait = 20 * time.Second

// nextTask asks a worker for the next task delegated to this agent: nil
// when none came within taskWait.
func (c *Client) nextTask(ctx context.Context) (*taskMsg, error) {
	body, _ := json.Marshal(events.TaskNext{WaitMS: taskWait.Milliseconds()})
	rctx, cancel := context.WithTimeout(ctx, taskWait+15*time.Second)
	defer cancel()
	m, err := c.nc.RequestWithContext(rctx, events.TaskAPISubject(c.agent, "next"), body)
	if err != nil {
		return nil, fmt.Errorf("ask for a task (is a worker running?): %w", err)
	}
	if st := m.Header.Get(events.APIStatusHeader); st != "" {
		if strings.HasPrefix(st, "404") {
			return nil, nil
		}
		return nil, fmt.Errorf("ask for a task: status %s", st)
	}
	return &taskMsg{c: c, m: m, subject: m.Header.Get(events.TaskSubjectHeader), ackRef: m.Header.Get(events.TaskAckHeader)}, nil
}

// ack sends op (ack, nak, wip, term) for the task message; ack waits for
// the worker's answer.
func (t *taskMsg) ack(op string) error {
	subj := events.TaskAPISubject(t.c.agent, op)
	if op != "ack" {
		return t.c.nc.Publish(subj, []byte(t.ackRef))
	}
	m, err := t.c.nc.Request(subj, []byte(t.ackRef), 10*time.Second)
	if err != nil {
		return err
	}
	if st := m.Header.Get(events.APIStatusHeader); st != "" {
		return fmt.Errorf("status %s", st)
	}
	return nil
}
