package events

// ToolsListRequest is the optional body of a request on SubjectToolsList.
// With an Agent the listing leaves out the tools that agent's policy
// denies outright (whatever the arguments); an empty body lists every tool.
// It only shapes a listing: every call is judged by the gate anyway.
type ToolsListRequest struct {
	Agent string `json:"agent,omitempty"`
}
