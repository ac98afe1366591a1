package approval

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/toolgate/toolgate/pkg/tooldef"
)

// AmendmentKeyPrefix is the key prefix of amendments in the policy bucket:
// amendments.<id>.
const AmendmentKeyPrefix = "amendments."

// ErrInvalidAmendment reports an amendment that is malformed or wider than
// the call it was made for.
var ErrInvalidAmendment = errors.New("invalid amendment")

// Amendment is a scoped "always allow this" created by approving a call:
// calls by Agent of Tool (whose command starts with CommandPrefix, or whose
// path matches PathPattern, when set) are allowed from now on, unless a
// deny rule says otherwise. It is stored as JSON under amendments.<id> in
// the policy bucket.
type Amendment struct {
	// ID names the amendment; it is the key suffix and what revoke takes.
	ID string `json:"id"`
	// Agent is the agent the amendment is for (exact identity).
	Agent string `json:"agent"`
	// Tool is the canonical tool name.
	Tool string `json:"tool"`
	// CommandPrefix, for shell tools, allows commands whose words start
	// with these words.
	CommandPrefix string `json:"command_prefix,omitempty"`
	// PathPattern, for file tools, allows paths matching this glob.
	PathPattern string `json:"path_pattern,omitempty"`
	// CallID is the call whose approval created it.
	CallID string `json:"call_id,omitempty"`
	// CreatedBy lists who approved it.
	CreatedBy []string `json:"created_by,omitempty"`
	// Comment is the approver's remark.
	Comment string `json:"comment,omitempty"`
	// CreatedAt is when it was stored.
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt, when set, ends the amendment.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Grant is the signed approval that asked for this amendment; its
	// always_allow is the amendment's scope. Every worker verifies it
	// before the amendment takes effect.
	Grant *Decision `json:"grant,omitempty"`
}

// SameScope reports whether a and b allow the same calls: id, agent, tool,
// command prefix, path pattern and expiry.
func (a *Amendment) SameScope(b *Amendment) bool {
	if a.ID != b.ID || a.Agent != b.Agent || a.Tool != b.Tool || a.CommandPrefix != b.CommandPrefix || a.PathPattern != b.PathPattern {
		return false
	}
	if (a.ExpiresAt == nil) != (b.ExpiresAt == nil) {
		return false
	}
	return a.ExpiresAt == nil || a.ExpiresAt.Equal(*b.ExpiresAt)
}

// Active reports whether the amendment is in force at now.
func (a *Amendment) Active(now time.Time) bool {
	return a.ExpiresAt == nil || now.Before(*a.ExpiresAt)
}

// Validate checks the amendment's own shape: an id usable as a key token,
// an agent and a tool, and a pattern that is not everything.
func (a *Amendment) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidAmendment, fmt.Sprintf(format, args...))
	}
	if !validKeyToken(a.ID) {
		return bad("id: %q must be letters, digits, '-', '_' or '='", a.ID)
	}
	if a.Agent == "" || strings.ContainsAny(a.Agent, "*?[") {
		return bad("agent: %q must name one agent", a.Agent)
	}
	if a.Tool == "" || strings.ContainsAny(a.Tool, "*?[") {
		return bad("tool: %q must name one tool", a.Tool)
	}
	if a.CommandPrefix != "" && strings.TrimSpace(a.CommandPrefix) == "" {
		return bad("command_prefix: blank")
	}
	switch strings.Trim(a.PathPattern, "/*") {
	case "":
		if a.PathPattern != "" {
			return bad("path_pattern: %q matches every path", a.PathPattern)
		}
	}
	return nil
}

// ScopedTo checks that the amendment is no wider than the call it was made
// for: the call's agent and tool, a command prefix that is a whole-word
// prefix of the call's command. args are the call's decoded arguments.
func (a *Amendment) ScopedTo(agent, tool string, args map[string]any) error {
	if err := a.Validate(); err != nil {
		return err
	}
	if a.Agent != agent {
		return fmt.Errorf("%w: agent %q is not the caller %q", ErrInvalidAmendment, a.Agent, agent)
	}
	if a.Tool != tool {
		return fmt.Errorf("%w: tool %q is not the called tool %q", ErrInvalidAmendment, a.Tool, tool)
	}
	if a.CommandPrefix != "" {
		cmd, _ := firstString(args, argNames(tool, tooldef.Command, "command"))
		if !WordPrefix(cmd, a.CommandPrefix) {
			return fmt.Errorf("%w: command_prefix %q does not start the call's command", ErrInvalidAmendment, a.CommandPrefix)
		}
	}
	return nil
}

// WordPrefix reports whether the words of prefix are the first words of
// command (words split on white space).
func WordPrefix(command, prefix string) bool {
	cw, pw := strings.Fields(command), strings.Fields(prefix)
	if len(pw) == 0 || len(pw) > len(cw) {
		return false
	}
	for i := range pw {
		if cw[i] != pw[i] {
			return false
		}
	}
	return true
}

// DefaultScope proposes the amendment scope for "approve and always allow
// this": the call's agent and tool, plus for a shell command its program
// and subcommand (the words before the first flag or path, at most two),
// and for a file tool the exact path.
func DefaultScope(agent, tool string, args map[string]any) Amendment {
	a := Amendment{Agent: agent, Tool: tool}
	if cmd, ok := firstString(args, argNames(tool, tooldef.Command, "command")); ok {
		var words []string
		for _, w := range strings.Fields(cmd) {
			if len(words) == 2 || strings.HasPrefix(w, "-") || strings.ContainsAny(w, "/.$`|;&<>(){}\"'*?") {
				break
			}
			words = append(words, w)
		}
		if len(words) == 0 {
			words = strings.Fields(cmd)[:min(1, len(strings.Fields(cmd)))]
		}
		a.CommandPrefix = strings.Join(words, " ")
	}
	if p, ok := firstString(args, argNames(tool, tooldef.Path, "path", "file_path", "filePath")); ok && p != "" {
		a.PathPattern = p
	}
	return a
}

// argNames returns the name of the argument of tool with role r when tool
// is a built-in tool (none when it has no such argument), else the names
// other tools commonly give it.
func argNames(tool string, r tooldef.Role, common ...string) []string {
	d, ok := tooldef.Lookup(tool)
	if !ok {
		return common
	}
	if a := d.Arg(r); a != nil {
		return []string{a.Name}
	}
	return nil
}

// firstString returns the first of the named arguments that is a
// non-empty string, or else the first that is a string.
func firstString(args map[string]any, names []string) (string, bool) {
	var first string
	found := false
	for _, n := range names {
		if s, ok := args[n].(string); ok {
			if s != "" {
				return s, true
			}
			if !found {
				first, found = s, true
			}
		}
	}
	return first, found
}

func validKeyToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r == '-' || r == '_' || r == '=' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')) {
			return false
		}
	}
	return true
}
