package events

import (
	"fmt"
	"strings"
	"time"
)

// Delegation: the task tool hands a sub-task to another agent of the
// fleet. The worker running the parent's task call publishes the request
// on toolgate.task.<target>.<task id> (stream TOOLGATE_TASKS, a work
// queue, so an agent briefly away still gets it); the target agent
// answers on toolgate.task_result.<target>.<task id> (stream
// TOOLGATE_TASK_RESULTS), reports progress on
// toolgate.task_progress.<target>.<task id> (core NATS, best effort), and
// hears a cancellation on toolgate.task_cancel.<target>.<task id>. An
// agent answers only in its own subject space; the worker listens there
// for the one agent it delegated to. The task id is the parent's task
// call id.

// CloudEvents types of delegation.
const (
	TypeTaskRequested = "dev.toolgate.task.requested.v1"
	TypeTaskCompleted = "dev.toolgate.task.completed.v1"
	TypeTaskProgress  = "dev.toolgate.task.progress.v1"
	TypeTaskCancelled = "dev.toolgate.task.cancelled.v1"
)

// Subject roots of delegation.
const (
	// SubjectTasks matches every task request: toolgate.task.<agent>.<task id>.
	SubjectTasks = Prefix + ".task.>"
	// SubjectTaskResults matches every task result:
	// toolgate.task_result.<agent>.<task id>.
	SubjectTaskResults = Prefix + ".task_result.>"
	// SubjectTaskProgress matches every task progress report.
	SubjectTaskProgress = Prefix + ".task_progress.>"
	// SubjectTaskCancel matches every task cancellation.
	SubjectTaskCancel = Prefix + ".task_cancel.>"
)

// TaskSubject is where a task for agent is published.
func TaskSubject(agent, taskID string) string { return Prefix + ".task." + agent + "." + taskID }

// TasksOf matches every task for agent.
func TasksOf(agent string) string { return Prefix + ".task." + agent + ".>" }

// TaskResultSubject is where agent answers task taskID.
func TaskResultSubject(agent, taskID string) string {
	return Prefix + ".task_result." + agent + "." + taskID
}

// TaskProgressSubject is where agent reports progress on task taskID.
func TaskProgressSubject(agent, taskID string) string {
	return Prefix + ".task_progress." + agent + "." + taskID
}

// TaskCancelSubject is where the cancellation of task taskID, delegated
// to agent, is announced.
func TaskCancelSubject(agent, taskID string) string {
	return Prefix + ".task_cancel." + agent + "." + taskID
}

// TaskCancelsOf matches every cancellation of agent's tasks.
func TaskCancelsOf(agent string) string { return Prefix + ".task_cancel." + agent + ".*" }

// ParseTaskSubject splits toolgate.<kind>.<agent>.<task id> (kind task,
// task_result, task_progress or task_cancel) into its agent and task id.
func ParseTaskSubject(subject string) (agent, taskID string, err error) {
	parts := strings.Split(subject, ".")
	if len(parts) != 4 || parts[0] != Prefix || !strings.HasPrefix(parts[1], "task") {
		return "", "", fmt.Errorf("subject %q is not %s.task*.<agent>.<task id>", subject, Prefix)
	}
	for _, tok := range parts[2:] {
		if err := ValidToken(tok); err != nil {
			return "", "", fmt.Errorf("subject %q: %w", subject, err)
		}
	}
	return parts[2], parts[3], nil
}

// TaskRequestData is the data of a dev.toolgate.task.requested.v1 event:
// what the delegating agent asks of the target agent.
type TaskRequestData struct {
	// TaskID is the task's id: fresh and random (NewID), not the parent's
	// call id, which the sub-agent must not learn.
	TaskID string `json:"task_id"`
	// Agent is the agent the task is for.
	Agent string `json:"agent"`
	// ParentAgent delegated the task.
	ParentAgent string `json:"parent_agent"`
	// ParentCallID is no longer sent (empty): the parent's call id is
	// not the sub-agent's to know. The sub-agent's calls carry the
	// TaskID in CallData.ParentCallID.
	ParentCallID string `json:"parent_call_id,omitempty"`
	// SessionID is the parent's session; the sub-agent's calls carry it.
	SessionID string `json:"session_id,omitempty"`
	// Prompt says what to do.
	Prompt string `json:"prompt"`
	// Context is what the parent knows that helps.
	Context string `json:"context,omitempty"`
	// ExpectedOutcome says what a good answer looks like.
	ExpectedOutcome string `json:"expected_outcome,omitempty"`
	// AllowedTools, when not empty, are the only tools the sub-agent's
	// calls for this task may use; the worker refuses any other.
	AllowedTools []string `json:"allowed_tools,omitempty"`
	// Deadline is when the parent stops waiting.
	Deadline time.Time `json:"deadline"`
}

// Task statuses in TaskResultData.
const (
	TaskOK        = "ok"        // the sub-agent did the task
	TaskFailed    = "error"     // the sub-agent could not do it
	TaskCancelled = "cancelled" // the sub-agent stopped: the parent cancelled
)

// TaskResultData is the data of a dev.toolgate.task.completed.v1 event:
// the sub-agent's answer. In the parent's result (metadata "task") the
// worker replaces FilesModified and ToolCallCount with what it recorded
// of the sub-agent's calls through toolgate, and ExecutionTimeMS with the
// time it waited.
type TaskResultData struct {
	TaskID string `json:"task_id"`
	// Status is ok, error or cancelled.
	Status string `json:"status"`
	// Summary is the sub-agent's answer.
	Summary string `json:"summary"`
	// FilesModified lists files changed by the task's calls.
	FilesModified []string `json:"files_modified"`
	// Errors lists what went wrong.
	Errors []string `json:"errors"`
	// ToolCallCount is how many calls the task made.
	ToolCallCount int `json:"tool_call_count"`
	// ExecutionTimeMS is how long the task took.
	ExecutionTimeMS int64 `json:"execution_time_ms"`
}

// TaskProgressData is the data of a dev.toolgate.task.progress.v1 event.
type TaskProgressData struct {
	TaskID  string `json:"task_id"`
	Message string `json:"message"`
}

// TaskCancelData is the data of a dev.toolgate.task.cancelled.v1 event.
type TaskCancelData struct {
	TaskID string `json:"task_id"`
	// Reason says why: the parent call was cancelled or timed out.
	Reason string `json:"reason"`
}
