package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
)

// Task record states.
const (
	stateRunning   = "running"
	stateDone      = "done"
	stateCancelled = "cancelled"
	stateTimedOut  = "timed_out"
)

// Record is what the tasks bucket holds per delegated task: written by
// the worker that delegated it, updated by the workers that run the
// task's calls, read by nobody else (agents cannot reach the bucket).
type Record struct {
	TaskID       string    `json:"task_id"`
	Agent        string    `json:"agent"` // the target agent
	ParentAgent  string    `json:"parent_agent"`
	ParentCallID string    `json:"parent_call_id"`
	SessionID    string    `json:"session_id,omitempty"`
	AllowedTools []string  `json:"allowed_tools,omitempty"`
	State        string    `json:"state"`
	Created      time.Time `json:"created"`
	Deadline     time.Time `json:"deadline"`
	// BudgetAgent and BudgetSession are whose budget the task's calls
	// count against: the root of the delegation chain.
	BudgetAgent   string `json:"budget_agent"`
	BudgetSession string `json:"budget_session,omitempty"`
	// What the task's calls through toolgate did.
	ToolCalls     int      `json:"tool_calls"`
	FilesModified []string `json:"files_modified,omitempty"`
	Errors        []string `json:"errors,omitempty"`
}

// maxRecordErrors bounds the errors a record keeps.
const maxRecordErrors = 50

// store reads and updates task records with compare-and-set.
type store struct{ kv jetstream.KeyValue }

func (s store) create(ctx context.Context, r *Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = s.kv.Create(ctx, bus.AgentKey(r.Agent, r.TaskID), b)
	return err
}

func (s store) get(ctx context.Context, agent, id string) (*Record, uint64, error) {
	e, err := s.kv.Get(ctx, bus.AgentKey(agent, id))
	if err != nil {
		return nil, 0, err
	}
	var r Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, 0, fmt.Errorf("task record %s: %w", e.Key(), err)
	}
	return &r, e.Revision(), nil
}

// casAttempts bounds the compare-and-set retries of one update: workers
// running a task's calls at once update its record concurrently.
const casAttempts = 20

// update applies fn to the record and writes it back unless another
// writer came first, then tries again.
func (s store) update(ctx context.Context, agent, id string, fn func(*Record)) (*Record, error) {
	var err error
	for range casAttempts {
		var (
			r   *Record
			rev uint64
		)
		r, rev, err = s.get(ctx, agent, id)
		if err != nil {
			return nil, err
		}
		fn(r)
		b, merr := json.Marshal(r)
		if merr != nil {
			return nil, merr
		}
		if _, err = s.kv.Update(ctx, bus.AgentKey(agent, id), b, rev); err == nil {
			return r, nil
		}
		// Another writer came first (the library maps both the single
		// and the replicated stream's conflict code to this error).
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("update task record %s: %w", bus.AgentKey(agent, id), err)
}

func addError(r *Record, e string) {
	if len(r.Errors) < maxRecordErrors {
		r.Errors = append(r.Errors, e)
	}
}

func addFile(r *Record, f string) {
	if f != "" && !slices.Contains(r.FilesModified, f) {
		r.FilesModified = append(r.FilesModified, f)
	}
}
