package events

// The services agents reach instead of the JetStream API (their account
// has none): their own stored results and the tasks delegated to them,
// answered by workers. The <agent> token of a request's subject is the
// caller: an agent's credentials let it send only on its own.
const (
	// ResultAPIPrefix starts toolgate.api.result.<agent>.<call id>: the
	// answer is the call's latest stored result message, headers and
	// all, or an APIStatusHeader of 404.
	ResultAPIPrefix = Prefix + ".api.result."
	// SubjectResultAPI matches every stored-result request.
	SubjectResultAPI = ResultAPIPrefix + "*.*"
	// TaskAPIPrefix starts toolgate.api.task.<agent>.<op>: op "next"
	// hands over the next task delegated to the agent (body TaskNext;
	// the answer is the task message with TaskAckHeader and
	// TaskSubjectHeader, or an APIStatusHeader of 404 when none came),
	// "ack", "nak", "wip" and "term" acknowledge the task message named
	// by the body (the TaskAckHeader value).
	TaskAPIPrefix = Prefix + ".api.task."
	// SubjectTaskAPI matches every task request.
	SubjectTaskAPI = TaskAPIPrefix + "*.*"

	// APIStatusHeader, on an answer, is "404 …" when there is nothing,
	// "400 …" for a bad request, "500 …" when the worker failed.
	APIStatusHeader = "Toolgate-Status"
	// TaskAckHeader names the task message handed over.
	TaskAckHeader = "Toolgate-Task-Ack"
	// TaskSubjectHeader is the subject the task was stored under.
	TaskSubjectHeader = "Toolgate-Task-Subject"
)

// ResultAPISubject is the subject agent asks callID's stored result on.
func ResultAPISubject(agent, callID string) string { return ResultAPIPrefix + agent + "." + callID }

// TaskAPISubject is the subject agent sends task operation op on.
func TaskAPISubject(agent, op string) string { return TaskAPIPrefix + agent + "." + op }

// TaskNext is the body of a next-task request.
type TaskNext struct {
	// WaitMS is how long to wait for a task (a worker waits at most 25 s).
	WaitMS int64 `json:"wait_ms,omitempty"`
}
