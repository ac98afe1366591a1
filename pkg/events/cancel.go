package events

// SubjectCancels matches every cancellation request:
// toolgate.cancel.<agent>.<call id>.
const SubjectCancels = Prefix + ".cancel.>"

// CancelSubject is where agent asks to cancel its call callID. An agent
// may publish only on its own agent token, so it cancels only its own
// calls. A request with a reply subject is answered with a CancelReply.
func CancelSubject(agent, callID string) string { return Prefix + ".cancel." + agent + "." + callID }

// Where a call was when its cancellation was handled (CancelReply.State).
const (
	// CancelFinished: the call had already ended; nothing was done.
	CancelFinished = "finished"
	// CancelQueued: no worker had started the call; the worker that takes
	// it answers cancelled without running it.
	CancelQueued = "queued"
	// CancelParked: the call was waiting for approval; the approval
	// request is withdrawn and the call answered cancelled.
	CancelParked = "parked"
	// CancelRunning: a worker was running the call; it is stopped (the
	// whole process tree of a command is killed).
	CancelRunning = "running"
	// CancelUnknown: the agent has no call with this id queued, parked,
	// running or finished (a mistyped id). The cancellation is kept all
	// the same: a call published later with this id is answered
	// cancelled without running.
	CancelUnknown = "unknown"
)

// CancelReply answers a cancellation request (plain JSON, not a
// CloudEvent). The call's result, status cancelled unless it had
// finished, follows on its result subject.
type CancelReply struct {
	CallID string `json:"call_id"`
	Agent  string `json:"agent"`
	// State is finished, queued, parked, running or unknown.
	State string `json:"state"`
	// Status is the final status of a call that had finished.
	Status Status `json:"status,omitempty"`
	// Worker names the worker that was running the call, when known.
	Worker string `json:"worker,omitempty"`
	// Message says what happened, for a person.
	Message string `json:"message"`
	// Error is set when the request could not be handled.
	Error string `json:"error,omitempty"`
}
