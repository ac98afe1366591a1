// Package delegate is delegation over the bus: the task tool, which hands
// a sub-task to another agent of the fleet and waits for its answer, and
// the middleware that holds the sub-agent's calls to what the task
// allows.
//
// The worker running a task call stores a task record (bucket
// toolgate_tasks, key <target>.<task id>; the task id is the task call's
// id), publishes the request on toolgate.task.<target>.<task id> (the
// work-queue stream TOOLGATE_TASKS, so an agent briefly away still gets
// it) and waits for the answer on toolgate.task_result.<target>.<task id>,
// forwarding progress from toolgate.task_progress.<target>.<task id> to
// the task call's own progress. When the task call ends first (timeout,
// cancellation, shutdown) the record is marked over and the cancellation
// announced on toolgate.task_cancel.<target>.<task id>.
//
// A sub-agent's call names its task in CallData.ParentCallID. The
// middleware reads the record the delegating worker stored (never what
// the call claims beyond the id): a call naming no task delegated to its
// agent, or a task that is over, or a tool outside the task's allowed
// tools, is denied. Calls that pass set tools.Call.Parent (whose budget
// they count against) and are counted in the record, with the files
// their write tools changed.
package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tooldef"
	"github.com/toolgate/toolgate/pkg/tools"
)

// ToolName is the task tool's name (its definition is tooldef.Task).
const ToolName = "task"

// Timeouts of the task tool.
const (
	DefaultTimeout = 10 * time.Minute
	MaxTimeout     = 2 * time.Hour
)

// RuleAllowedTools is the rule named by the denial of a sub-agent's call
// of a tool its task does not allow; RuleNoTask by the denial of a call
// naming a task that was not delegated to its agent or is over.
const (
	RuleAllowedTools = "task.allowed_tools"
	RuleNoTask       = "task.unknown"
)

// storedResultCheck is how often a waiting task call also looks for the
// stored answer, in case the live one was missed.
const storedResultCheck = 2 * time.Second

// Delegator hands tasks out and checks the calls made for them.
type Delegator struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	store   store
	reg     *tools.Registry
	log     *slog.Logger
	source  string
	answers jetstream.Stream
}

// Config configures a Delegator.
type Config struct {
	// Worker names the worker in the CloudEvents source of the requests;
	// default host-pid, as the worker's own default.
	Worker string
	// Registry resolves the allowed tools' aliases to canonical names.
	Registry *tools.Registry
	// Logger receives warnings; default slog.Default().
	Logger *slog.Logger
}

// New opens the tasks bucket and stream (provisioned by internal/bus).
func New(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg Config) (*Delegator, error) {
	kv, err := js.KeyValue(ctx, bus.BucketTasks)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", bus.BucketTasks, err)
	}
	st, err := js.Stream(ctx, bus.StreamTaskResults)
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", bus.StreamTaskResults, err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Worker == "" {
		host, _ := os.Hostname()
		cfg.Worker = fmt.Sprintf("%s-%d", host, os.Getpid()) // as the worker names itself
	}
	return &Delegator{nc: nc, js: js, store: store{kv: kv}, reg: cfg.Registry, log: cfg.Logger,
		source: "toolgate://worker/" + cfg.Worker, answers: st}, nil
}

// Tool returns the task tool.
func (d *Delegator) Tool() *tools.Tool {
	return &tools.Tool{
		Name:            tooldef.Task.Name,
		Description:     "Delegate a sub-task to another agent of the fleet and wait for its answer: a summary, the files it modified, its errors, how many tool calls it made. Its calls are held to allowed_tools.",
		Parameters:      tooldef.Task.MustSchema(nil),
		Kind:            policy.Kind(tooldef.Task.Kind),
		Category:        "builtin",
		DefaultTimeout:  DefaultTimeout,
		MaxTimeout:      MaxTimeout,
		TimeoutArgument: "timeout",
		Handler:         tools.HandlerFunc(d.run),
	}
}

// request builds the task request of call c, with the allowed tools
// resolved to canonical names and narrowed by c's own task, if any.
func (d *Delegator) request(c *tools.Call, deadline time.Time) (*events.TaskRequestData, error) {
	str := func(k string) string { s, _ := c.Args[k].(string); return s }
	target := str("agent")
	if err := events.ValidToken(target); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if target == c.Agent {
		return nil, fmt.Errorf("agent: %s cannot delegate to itself (it would wait for itself)", target)
	}
	var allowed []string
	if list, ok := c.Args["allowed_tools"].([]any); ok {
		if len(list) == 0 {
			return nil, errors.New("allowed_tools: empty; leave it out to allow what the agent's policy allows")
		}
		for _, v := range list {
			name, _ := v.(string)
			t, ok := d.reg.Get(name)
			if !ok {
				return nil, fmt.Errorf("allowed_tools: unknown tool %q; available tools: %s", name, strings.Join(d.reg.Names(), ", "))
			}
			if !slices.Contains(allowed, t.Name) {
				allowed = append(allowed, t.Name)
			}
		}
	}
	if c.Parent != nil && len(c.Parent.AllowedTools) > 0 {
		// A task's sub-agent delegating further hands on no more than
		// its own task allows.
		if allowed == nil {
			allowed = append([]string(nil), c.Parent.AllowedTools...)
		} else {
			var both []string
			for _, t := range allowed {
				if c.Parent.Allows(t) {
					both = append(both, t)
				}
			}
			if len(both) == 0 {
				return nil, fmt.Errorf("allowed_tools: none of %v is allowed to this call's own task (%v)", allowed, c.Parent.AllowedTools)
			}
			allowed = both
		}
	}
	// The task id is fresh, never the parent's call id: the sub-agent
	// learns its task id, and a call id must not be learnt.
	return &events.TaskRequestData{TaskID: events.NewID(), Agent: target, ParentAgent: c.Agent,
		SessionID: c.SessionID, Prompt: str("prompt"), Context: str("context"), ExpectedOutcome: str("expected_outcome"),
		AllowedTools: allowed, Deadline: deadline.UTC()}, nil
}

// errTaskTimeout is the cause of the task tool's own deadline.
var errTaskTimeout = errors.New("task deadline")

func (d *Delegator) run(ctx context.Context, c *tools.Call) (*tools.Output, error) {
	start := time.Now()
	wait := DefaultTimeout
	if ms, ok := millis(c.Args["timeout"]); ok {
		wait = min(time.Duration(ms)*time.Millisecond, MaxTimeout)
	}
	deadline := start.Add(wait)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	req, err := d.request(c, deadline)
	if err != nil {
		return &tools.Output{IsError: true, Content: "task: " + err.Error()}, nil
	}
	ctx, cancel := context.WithDeadlineCause(ctx, start.Add(wait), fmt.Errorf("%w: %w after %s", tools.ErrTimeout, errTaskTimeout, wait))
	defer cancel()

	rec := &Record{TaskID: req.TaskID, Agent: req.Agent, ParentAgent: c.Agent, ParentCallID: c.ID, SessionID: c.SessionID,
		AllowedTools: req.AllowedTools, State: stateRunning, Created: start.UTC(), Deadline: req.Deadline,
		BudgetAgent: c.Agent, BudgetSession: c.SessionID}
	if c.Parent != nil {
		rec.BudgetAgent, rec.BudgetSession = c.Parent.BudgetAgent, c.Parent.BudgetSession
	}
	if err := d.store.create(ctx, rec); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return &tools.Output{IsError: true, Content: fmt.Sprintf("task: a task %s was already delegated to %s", req.TaskID, req.Agent)}, nil
		}
		return nil, fmt.Errorf("store task record: %w", err)
	}
	// Listen before asking, so a fast answer is not missed.
	ch := make(chan *nats.Msg, 256)
	resultSubj := events.TaskResultSubject(req.Agent, req.TaskID)
	sub, err := d.nc.ChanSubscribe(resultSubj, ch)
	if err != nil {
		return nil, d.abandon(req, fmt.Errorf("subscribe %s: %w", resultSubj, err))
	}
	defer sub.Unsubscribe()
	psub, err := d.nc.ChanSubscribe(events.TaskProgressSubject(req.Agent, req.TaskID), ch)
	if err != nil {
		return nil, d.abandon(req, fmt.Errorf("subscribe to task progress: %w", err))
	}
	defer psub.Unsubscribe()
	// No consumer is made here: the agent's own first request for its
	// next task makes it (the stream is a work queue, so the task waits
	// for it), and a task to an agent nobody serves as makes none.
	m, err := events.EncodeData(events.TaskSubject(req.Agent, req.TaskID),
		events.Attrs{ID: req.TaskID, Source: d.source, Type: events.TypeTaskRequested, Subject: req.TaskID}, req, events.Binary)
	if err != nil {
		return nil, d.abandon(req, err)
	}
	if _, err := d.js.PublishMsg(ctx, m); err != nil {
		return nil, d.abandon(req, fmt.Errorf("publish task for %s: %w", req.Agent, err))
	}
	if c.Progress != nil {
		c.Progress("task", fmt.Sprintf("task %s handed to %s\n", req.TaskID, req.Agent))
	}
	t := time.NewTicker(storedResultCheck)
	defer t.Stop()
	for {
		var msg *nats.Msg
		select {
		case msg = <-ch:
		case <-t.C:
			if raw, err := d.answers.GetLastMsgForSubject(ctx, resultSubj); err == nil {
				msg = &nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data}
			} else {
				continue
			}
		case <-ctx.Done():
			return nil, d.stop(req, context.Cause(ctx))
		}
		if msg.Subject != resultSubj {
			var p events.TaskProgressData
			if _, err := events.DecodeData(msg.Header, msg.Data, &p); err == nil && c.Progress != nil && p.Message != "" {
				c.Progress("task", p.Message)
			}
			continue
		}
		var res events.TaskResultData
		ev, err := events.DecodeData(msg.Header, msg.Data, &res)
		if err != nil || ev.Type() != events.TypeTaskCompleted || res.TaskID != req.TaskID {
			d.log.Warn("task answer ignored", "task_id", req.TaskID, "agent", req.Agent, "err", err)
			continue
		}
		if agent, ok := events.SourceAgent(ev.Source()); !ok || agent != req.Agent {
			d.log.Warn("task answer from the wrong source ignored", "task_id", req.TaskID, "source", ev.Source())
			continue
		}
		return d.answered(ctx, req, res, start)
	}
}

// answered closes the record and builds the task call's output from the
// sub-agent's answer and what the record says its calls did.
func (d *Delegator) answered(ctx context.Context, req *events.TaskRequestData, res events.TaskResultData, start time.Time) (*tools.Output, error) {
	rec, err := d.store.update(ctx, req.Agent, req.TaskID, func(r *Record) { r.State = stateDone })
	if err != nil {
		return nil, fmt.Errorf("close task record: %w", err)
	}
	res.FilesModified = append([]string{}, rec.FilesModified...)
	res.ToolCallCount = rec.ToolCalls
	res.Errors = append(append([]string{}, res.Errors...), rec.Errors...)
	res.ExecutionTimeMS = max(time.Since(start).Milliseconds(), 0)
	if res.Status == "" {
		res.Status = events.TaskOK
	}
	return &tools.Output{Content: Render(req.Agent, res), IsError: res.Status != events.TaskOK,
		Metadata: map[string]any{"task": res, "agent": req.Agent}}, nil
}

// Render is the task call's output for a model: the status, the summary,
// and what the task's calls did.
func Render(agent string, res events.TaskResultData) string {
	var b strings.Builder
	fmt.Fprintf(&b, "task %s (agent %s): %s\n", res.TaskID, agent, res.Status)
	if s := strings.TrimSpace(res.Summary); s != "" {
		b.WriteString(s)
		b.WriteString("\n")
	}
	if len(res.FilesModified) > 0 {
		fmt.Fprintf(&b, "files modified: %s\n", strings.Join(res.FilesModified, ", "))
	}
	for _, e := range res.Errors {
		fmt.Fprintf(&b, "error: %s\n", e)
	}
	fmt.Fprintf(&b, "tool calls: %d, time: %d ms", res.ToolCallCount, res.ExecutionTimeMS)
	return b.String()
}

// stop ends a task the parent stopped waiting for: the record is marked
// over (the sub-agent's further calls are refused) and the cancellation
// announced to the sub-agent.
func (d *Delegator) stop(req *events.TaskRequestData, cause error) error {
	state, reason := stateCancelled, "the parent call was cancelled"
	if errors.Is(cause, errTaskTimeout) || errors.Is(cause, tools.ErrTimeout) || errors.Is(cause, context.DeadlineExceeded) {
		state, reason = stateTimedOut, "the parent call timed out"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := d.store.update(ctx, req.Agent, req.TaskID, func(r *Record) {
		if r.State == stateRunning {
			r.State = state
		}
	}); err != nil {
		d.log.Warn("mark task over", "task_id", req.TaskID, "err", err)
	}
	m, err := events.EncodeData(events.TaskCancelSubject(req.Agent, req.TaskID),
		events.Attrs{ID: req.TaskID + ":cancel", Source: d.source, Type: events.TypeTaskCancelled, Subject: req.TaskID},
		events.TaskCancelData{TaskID: req.TaskID, Reason: reason}, events.Binary)
	if err == nil {
		err = d.nc.PublishMsg(m)
	}
	if err != nil {
		d.log.Warn("announce task cancellation", "task_id", req.TaskID, "err", err)
	}
	if cause == nil {
		cause = context.Canceled
	}
	return fmt.Errorf("task %s delegated to %s: %s: %w", req.TaskID, req.Agent, reason, cause)
}

// abandon marks a task that could not be handed out as over.
func (d *Delegator) abandon(req *events.TaskRequestData, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = d.store.update(ctx, req.Agent, req.TaskID, func(r *Record) { r.State = stateCancelled })
	return err
}

// Middleware checks every call that names a task (CallData.ParentCallID)
// against the task's record: the task must have been delegated to the
// calling agent and still be waited for, and the tool must be among its
// allowed tools; otherwise the call is denied. A call of the task (its
// tool allowed or not) gets tools.Call.Parent, which results and audit
// report as its parent_call_id; one that runs is counted in the record.
// Install it before any middleware that reads Parent (budgets).
func (d *Delegator) Middleware(next tools.Handler) tools.Handler {
	return tools.HandlerFunc(func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
		if c.ParentCallID == "" {
			return next.Handle(ctx, c)
		}
		rec, _, err := d.store.get(ctx, c.Agent, c.ParentCallID)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			return nil, deny(RuleNoTask, fmt.Sprintf("no task %s was delegated to agent %s", c.ParentCallID, c.Agent))
		case err != nil:
			// Errors fail closed: without the record nothing says what
			// the task allows.
			return nil, deny(RuleNoTask, fmt.Sprintf("task %s cannot be checked: %v", c.ParentCallID, err))
		case rec.State != stateRunning:
			return nil, deny(RuleNoTask, fmt.Sprintf("task %s is over (%s): its calls are refused", c.ParentCallID, strings.ReplaceAll(rec.State, "_", " ")))
		}
		p := &tools.Parent{TaskID: rec.TaskID, Agent: rec.ParentAgent, CallID: rec.ParentCallID, SessionID: rec.SessionID,
			AllowedTools: rec.AllowedTools, BudgetAgent: rec.BudgetAgent, BudgetSession: rec.BudgetSession}
		// The task is this agent's: the call is the task's, allowed or not.
		c.Parent = p
		if !p.Allows(c.Tool.Name) {
			reason := fmt.Sprintf("task %s allows only %s; %s is not among them", rec.TaskID, strings.Join(rec.AllowedTools, ", "), c.Tool.Name)
			d.record(c, func(r *Record) { addError(r, c.Tool.Name+" denied: "+reason) })
			return nil, deny(RuleAllowedTools, reason)
		}
		out, err := next.Handle(ctx, c)
		d.record(c, func(r *Record) {
			r.ToolCalls++
			switch {
			case err != nil:
				addError(r, fmt.Sprintf("%s (call %s): %v", c.Tool.Name, c.ID, err))
			case out != nil && out.IsError:
				addError(r, fmt.Sprintf("%s (call %s): %s", c.Tool.Name, c.ID, firstLine(out.Content)))
			case c.Tool.Kind == policy.KindWrite:
				addFile(r, modifiedPath(c, out))
			}
		})
		return out, err
	})
}

// record updates the record of c's task; a failure is logged (the call
// itself stands).
func (d *Delegator) record(c *tools.Call, fn func(*Record)) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := d.store.update(ctx, c.Agent, c.ParentCallID, fn); err != nil {
		d.log.Warn("update task record", "task_id", c.ParentCallID, "call_id", c.ID, "err", err)
	}
}

func deny(rule, reason string) error {
	return &tools.PolicyError{Decision: policy.Decision{Action: policy.Deny, Rule: rule, Reason: reason}}
}

// modifiedPath is the file a write tool's call changed: the path its
// output names (workspace-relative), else its path argument.
func modifiedPath(c *tools.Call, out *tools.Output) string {
	if out != nil {
		if p, ok := out.Metadata["path"].(string); ok && p != "" {
			return p
		}
	}
	p, _ := c.Args["path"].(string)
	return p
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

func millis(v any) (int64, bool) {
	switch n := v.(type) {
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	case float64:
		return int64(n), true
	}
	return 0, false
}
