package approval

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/pkg/policy/shell"
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
		starts, pw := false, strings.Fields(a.CommandPrefix)
		for _, argv := range commandArgvs(cmd) {
			starts = starts || slices.Equal(argv[:min(len(argv), len(pw))], pw)
		}
		if !starts {
			return fmt.Errorf("%w: command_prefix %q does not start any command of the call", ErrInvalidAmendment, a.CommandPrefix)
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

// DefaultScope is the narrowest of Scopes: what "approve and always allow
// this" offers unless a person widens it.
func DefaultScope(agent, tool string, args map[string]any, offending string) Amendment {
	return Scopes(agent, tool, args, offending)[0]
}

// Scopes proposes amendment scopes for "approve and always allow this",
// narrowest first; widening is a person's explicit choice of a later one.
// Each holds the call's agent and tool, and for a file tool the exact
// path. For a shell command each names a prefix of one simple command's
// words: the one the gate stopped at (offending, the decision's Offending
// text, when it names one of them), else the first. The narrowest is the
// whole simple command (for `rm -rf node_modules && npm ci`, "rm -rf
// node_modules"), then one word fewer each, down to the program and one
// more word: a program alone is offered only for a command of one word.
// Words are literal ones up to the first that is not (a variable, a
// substitution) or holds white space; a command with none gets no prefix,
// which covers no command.
func Scopes(agent, tool string, args map[string]any, offending string) []Amendment {
	base := Amendment{Agent: agent, Tool: tool}
	if p, ok := firstString(args, argNames(tool, tooldef.Path, "path", "file_path", "filePath")); ok && p != "" {
		base.PathPattern = p
	}
	cmd, ok := firstString(args, argNames(tool, tooldef.Command, "command"))
	if !ok {
		return []Amendment{base}
	}
	words := prefixWords(cmd, offending)
	if len(words) == 0 {
		return []Amendment{base}
	}
	var out []Amendment
	for n := len(words); n >= min(2, len(words)); n-- {
		a := base
		a.CommandPrefix = strings.Join(words[:n], " ")
		out = append(out, a)
	}
	return out
}

// prefixWords returns the literal leading words of the simple command of
// cmd that offending names, else of its first simple command.
func prefixWords(cmd, offending string) []string {
	var argvs [][]string
	if s, err := shell.Parse(cmd); err == nil {
		for _, c := range s.Commands {
			if c.Wrapper || c.Name() == "" {
				continue
			}
			var words []string
			for _, w := range c.Args {
				if !w.Literal || w.Value == "" || strings.ContainsAny(w.Value, " \t\n") {
					break
				}
				words = append(words, w.Value)
			}
			if offending != "" && strings.TrimSpace(c.Source) == strings.TrimSpace(offending) {
				return words
			}
			argvs = append(argvs, words)
		}
	}
	if len(argvs) == 0 {
		return nil
	}
	return argvs[0]
}

// commandArgvs are the literal words of every simple command of cmd, or
// its white-space separated words when it does not parse.
func commandArgvs(cmd string) [][]string {
	s, err := shell.Parse(cmd)
	if err != nil {
		return [][]string{strings.Fields(cmd)}
	}
	var out [][]string
	for _, c := range s.Commands {
		out = append(out, c.Argv())
	}
	return out
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
