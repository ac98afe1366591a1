package tools

// Parent is the verified origin of a sub-agent's call: the delegated
// task it serves, as the worker stored it when the task was handed out
// (never as the sub-agent claims it).
type Parent struct {
	// TaskID is the task's id (the parent's task call id).
	TaskID string
	// Agent and CallID are the parent's task call.
	Agent, CallID string
	// SessionID is the parent's session.
	SessionID string
	// AllowedTools, when not empty, are the only tools the task's calls
	// may use (canonical names).
	AllowedTools []string
	// BudgetAgent and BudgetSession are whose budget the call counts
	// against: the root of the delegation chain (the agent that
	// delegated first, and its session).
	BudgetAgent, BudgetSession string
}

// Allows reports whether the task lets its calls use tool (canonical
// name): any tool when no list was given.
func (p *Parent) Allows(tool string) bool {
	if p == nil || len(p.AllowedTools) == 0 {
		return true
	}
	for _, t := range p.AllowedTools {
		if t == tool {
			return true
		}
	}
	return false
}
