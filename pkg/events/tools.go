package events

// ToolsListRequest is the optional body of a request on SubjectToolsList.
// With an Agent the listing leaves out the tools that agent's policy
// denies outright (whatever the arguments); an empty body lists every tool.
// It only shapes a listing: every call is judged by the gate anyway. What
// an agent's policy denies is its own business, though: workers answer a
// listing for Agent only to that agent's inbox or an admin's (or a
// worker's), and refuse any other with a Nats-Service-Error header.
type ToolsListRequest struct {
	Agent string `json:"agent,omitempty"`
}
