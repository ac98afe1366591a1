package events

import "time"

// TypeBudgetExceeded is the type of the event published when a call is
// refused because a budget is spent.
const TypeBudgetExceeded = "dev.toolgate.budget.exceeded.v1"

// BudgetSubject is where budget events about agent are published.
func BudgetSubject(agent string) string { return Prefix + ".event.budget." + agent }

// BudgetExceededData is the data of a dev.toolgate.budget.exceeded.v1
// event: a call refused because a budget it counts against is spent.
type BudgetExceededData struct {
	CallID    string `json:"call_id"`
	Agent     string `json:"agent"`
	SessionID string `json:"session_id,omitempty"`
	Tool      string `json:"tool"`
	// Budget names the budget in the policy.
	Budget string `json:"budget"`
	// Scope is agent or session.
	Scope string `json:"scope"`
	// Limit is which limit was reached: max_calls, max_time or max_concurrent.
	Limit string `json:"limit"`
	// Max is the limit (calls, milliseconds of execution, or calls at once).
	Max int64 `json:"max"`
	// Used is what was used when the call came (same unit as Max).
	Used int64 `json:"used"`
	// ResetsAt is when the window ends; absent for a budget without a
	// window and for max_concurrent (a slot frees when a call ends).
	ResetsAt *time.Time `json:"resets_at,omitempty"`
	// Message says the same for a person.
	Message string `json:"message"`
	Worker  string `json:"worker"`
}
