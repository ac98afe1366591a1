package policy

import (
	"os"
	"time"
)

// Amendment is a scoped exception people grant when they approve a call
// and choose "always allow this": it turns an ask into allow for exactly
// its scope (this agent, this tool, and a command prefix or a path
// pattern). It never turns a deny into allow, and never covers a reason to
// ask other than the rule it was granted against (an unknown expansion, a
// path outside the workspace, a write by redirection).
type Amendment struct {
	// ID names the amendment; decisions cite it as amendments[<id>].
	ID string `json:"id"`
	// Agent is the agent id it applies to (exact).
	Agent string `json:"agent"`
	// Tool is the tool it applies to (aliases accepted).
	Tool string `json:"tool"`
	// CommandPrefix, for shell tools, is the argv prefix every covered
	// simple command starts with, e.g. ["git", "push"].
	CommandPrefix []string `json:"command_prefix,omitempty"`
	// PathPattern, for file tools, is a path glob (same syntax as
	// denied_paths) the resolved path must match.
	PathPattern string `json:"path_pattern,omitempty"`
	// CreatedBy is who granted it.
	CreatedBy string `json:"created_by,omitempty"`
	// Reason is why.
	Reason string `json:"reason,omitempty"`
	// CreatedAt is when.
	CreatedAt time.Time `json:"created_at"`
}

type compiledAmendment struct {
	Amendment
	tool string
	glob *pathGlob
}

// SetAmendments replaces the amendments in force. Amendments without an
// agent or a tool are ignored, as are path patterns that do not compile.
func (g *Gate) SetAmendments(as []Amendment) {
	home, _ := os.UserHomeDir()
	out := make([]compiledAmendment, 0, len(as))
	for _, a := range as {
		if a.Agent == "" || a.Tool == "" || a.ID == "" {
			continue
		}
		c := compiledAmendment{Amendment: a, tool: CanonicalTool(a.Tool)}
		c.CommandPrefix = append([]string(nil), a.CommandPrefix...)
		if a.PathPattern != "" {
			gl, err := compileGlob(a.PathPattern, home)
			if err != nil {
				continue
			}
			c.glob = gl
		}
		out = append(out, c)
	}
	g.amend.Store(&out)
}

// amendment returns the amendment that covers every ask of the evaluation,
// or nil and, when amendments for this agent and tool exist, the first
// finding none of them covers (to report instead of a covered one).
func (e *evaluation) amendment() (*compiledAmendment, *item) {
	as := e.g.amend.Load()
	if as == nil {
		return nil, nil
	}
	var first *item
	for i := range *as {
		a := &(*as)[i]
		if a.Agent != e.req.Agent || a.tool != e.tool {
			continue
		}
		it := e.uncovered(a)
		if it == nil {
			return a, nil
		}
		if first == nil || (it.hard && !first.hard) {
			first = it
		}
	}
	return nil, first
}

// uncovered returns the first finding that is not allow and that a does
// not cover, or nil when a covers them all.
func (e *evaluation) uncovered(a *compiledAmendment) *item {
	shellTool := isShellTool(e.tool)
	fileTool := isFileTool(e.tool)
	commands := 0
	for _, it := range e.items {
		if it.argv != nil {
			commands++
		}
	}
	for i := range e.items {
		it := &e.items[i]
		if it.action == Allow {
			continue
		}
		if it.action == Deny || it.hard {
			return it
		}
		switch {
		case shellTool:
			if len(a.CommandPrefix) == 0 {
				return it
			}
			if it.toolLevel {
				// The tool-level ask is covered when every command is.
				if commands == 0 {
					return it
				}
				for j := range e.items {
					c := &e.items[j]
					if c.argv != nil && c.action != Allow && !hasPrefix(c.argv, a.CommandPrefix) {
						return c
					}
				}
				continue
			}
			if it.argv == nil || !hasPrefix(it.argv, a.CommandPrefix) {
				return it
			}
		case fileTool:
			if a.glob == nil || len(e.paths) == 0 {
				return it
			}
			for _, p := range e.paths {
				if !a.glob.match(splitFolded(p), e.wsSegs) {
					return it
				}
			}
		default:
			if len(a.CommandPrefix) > 0 || a.glob != nil {
				return it
			}
		}
	}
	return nil
}

func hasPrefix(argv, prefix []string) bool {
	if len(argv) < len(prefix) {
		return false
	}
	for i := range prefix {
		if argv[i] != prefix[i] {
			return false
		}
	}
	return true
}
