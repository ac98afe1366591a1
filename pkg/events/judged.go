package events

// Judged is the policy gate's view of a call in an audit event: what the
// gate judged of its arguments, and nothing else of them (no file
// contents, no payloads; secrets the redaction removes are removed here
// too, and such a view is marked Redacted).
type Judged struct {
	// Workspace is the workspace root relative paths were resolved against.
	Workspace string `json:"ws,omitempty"`
	// Kind is the kind of a tool that is not built in; Unknown marks a
	// tool no worker registered.
	Kind    string `json:"kind,omitempty"`
	Unknown bool   `json:"unknown,omitempty"`
	// Command is a shell tool's command as judged and run (rendered from
	// its syntax tree); Workdir its working directory argument.
	Command string `json:"cmd,omitempty"`
	Workdir string `json:"cwd,omitempty"`
	// Path and Pattern are a file tool's path and path pattern arguments.
	Path    string `json:"path,omitempty"`
	Pattern string `json:"pattern,omitempty"`
	// Hosts are a network tool's host:port, as judged from its URL.
	Hosts []string `json:"hosts,omitempty"`
	// Links map each path the gate resolved through a symbolic link to
	// the real path it judged.
	Links map[string]string `json:"links,omitempty"`
	// Redacted marks a view a secret was removed from: it is not judged
	// again.
	Redacted bool `json:"redacted,omitempty"`
}
