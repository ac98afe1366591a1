package policy

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// BudgetScope says whose calls one budget counter counts.
type BudgetScope string

// The scopes of a budget.
const (
	// ScopeAgent counts every call of an agent in one counter.
	ScopeAgent BudgetScope = "agent"
	// ScopeSession counts the calls of each session of an agent apart;
	// calls without a session share one counter per agent.
	ScopeSession BudgetScope = "session"
)

// MaxBudgetWindow is the longest window (per) a budget may have. Usage
// records untouched longer than this are forgotten (internal/bus keeps the
// budgets bucket's records a little longer).
const MaxBudgetWindow = 30 * 24 * time.Hour

// Budget is one entry of a policy's budgets section: limits on the calls
// an agent (or a session of it) may make, enforced across every worker.
// A call counts against every budget that applies to it, and is refused
// when any of them is spent.
type Budget struct {
	// Name names the budget in errors, events and `toolctl budgets`.
	Name string `json:"name"`
	// Scope is agent (one counter per agent) or session (one per session).
	Scope BudgetScope `json:"scope"`
	// Agents are the agent patterns (path.Match globs) the budget applies
	// to; empty means every agent.
	Agents []string `json:"agents,omitempty"`
	// Tools are the canonical tool names whose calls count; empty means
	// every tool.
	Tools []string `json:"tools,omitempty"`
	// PerTool keeps a counter per tool instead of one for all the tools.
	PerTool bool `json:"per_tool,omitempty"`
	// MaxCalls bounds the calls started in a window; 0 means no bound.
	MaxCalls int `json:"max_calls,omitempty"`
	// MaxTime bounds the total execution time of the calls in a window;
	// 0 means no bound. A call never runs past the time left.
	MaxTime time.Duration `json:"max_time,omitempty"`
	// MaxConcurrent bounds the calls running at once; 0 means no bound.
	MaxConcurrent int `json:"max_concurrent,omitempty"`
	// Per is the window the calls and time are counted in (fixed windows
	// aligned on the Unix epoch, UTC); 0 means the counter never resets
	// (for a session: the session's lifetime).
	Per time.Duration `json:"per,omitempty"`
	// Line is where the budget is written in its document.
	Line int `json:"line,omitempty"`
}

// Budgets returns the policy's budgets in the order written.
func (p *Policy) Budgets() []Budget {
	if p == nil {
		return nil
	}
	return slices.Clone(p.budgets)
}

// Applies reports whether a call of tool (canonical name) by agent counts
// against b.
func (b Budget) Applies(agent, tool string) bool {
	if len(b.Tools) > 0 && !slices.Contains(b.Tools, CanonicalTool(tool)) {
		return false
	}
	if len(b.Agents) == 0 {
		return true
	}
	for _, pat := range b.Agents {
		if ok, _ := path.Match(pat, agent); ok {
			return true
		}
	}
	return false
}

// Window returns the window of b that holds t: its start and when it
// resets. A budget without a window returns zero times.
func (b Budget) Window(t time.Time) (start, resets time.Time) {
	if b.Per <= 0 {
		return time.Time{}, time.Time{}
	}
	start = t.UTC().Truncate(b.Per)
	return start, start.Add(b.Per)
}

// budgetName is what a budget may be called, compiled on first use: its
// counted repetition makes a large program.
var budgetName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`) })

// budgets decodes the budgets section: a mapping of budget names to
// their settings.
func (d *decoder) budgets(n *yaml.Node, p *Policy) {
	n = deref(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	for _, f := range d.fields(n, "budgets") {
		at := "budgets." + f.raw
		if !budgetName().MatchString(f.raw) {
			d.errf(f.kn, at, "a budget name is 1 to 64 letters, digits, '-' or '_'")
			continue
		}
		b := Budget{Name: f.raw, Scope: ScopeAgent, Line: f.kn.Line}
		for _, g := range d.fields(f.value, at) {
			name := join(at, g.raw)
			switch g.key {
			case "scope":
				if s, ok := d.str(g.value, name); ok {
					switch BudgetScope(strings.ToLower(s)) {
					case ScopeAgent, ScopeSession:
						b.Scope = BudgetScope(strings.ToLower(s))
					default:
						d.errf(g.value, name, "must be agent or session, not %q", s)
					}
				}
			case "agents", "agent":
				for _, a := range d.strings(g.value, name) {
					pat := strings.TrimSpace(a.Value)
					if _, err := path.Match(pat, ""); err != nil {
						d.errf(a, name, "bad agent pattern %q: %v", pat, err)
						continue
					}
					b.Agents = append(b.Agents, pat)
				}
			case "tools", "tool":
				for _, t := range d.strings(g.value, name) {
					b.Tools = append(b.Tools, CanonicalTool(strings.TrimSpace(t.Value)))
					if s := suggest(t.Value, knownTools()); s != "" {
						d.warnf(t.Line, name, "%q is not a built-in tool; did you mean %s? (else a tool of that name must be registered)", t.Value, s)
					}
				}
			case "per_tool":
				b.PerTool, _ = d.boolean(g.value, name)
			case "max_calls":
				b.MaxCalls, _ = d.integer(g.value, name, 1)
			case "max_concurrent":
				b.MaxConcurrent, _ = d.integer(g.value, name, 1)
			case "max_time":
				b.MaxTime, _ = d.duration(g.value, name)
			case "per":
				if v, ok := d.duration(g.value, name); ok {
					if v > MaxBudgetWindow {
						d.errf(g.value, name, "must be at most %s (30 days), not %s", MaxBudgetWindow, v)
					} else {
						b.Per = v
					}
				}
			default:
				d.errf(g.kn, name, "unknown field (expected scope, agents, tools, per_tool, max_calls, max_time, max_concurrent or per)")
			}
		}
		switch {
		case b.MaxCalls == 0 && b.MaxTime == 0 && b.MaxConcurrent == 0:
			d.errf(f.kn, at, "sets no limit: give max_calls, max_time or max_concurrent")
		case b.Per > 0 && b.MaxCalls == 0 && b.MaxTime == 0:
			d.warnf(f.kn.Line, at+".per", "has no effect: per is the window of max_calls and max_time, and max_concurrent has none")
		}
		p.budgets = append(p.budgets, b)
	}
}

// String describes the limits of b for people.
func (b Budget) String() string {
	var parts []string
	if b.MaxCalls > 0 {
		parts = append(parts, fmt.Sprintf("%d calls", b.MaxCalls))
	}
	if b.MaxTime > 0 {
		parts = append(parts, b.MaxTime.String()+" of execution")
	}
	if b.MaxConcurrent > 0 {
		parts = append(parts, fmt.Sprintf("%d at once", b.MaxConcurrent))
	}
	s := strings.Join(parts, ", ") + " per " + string(b.Scope)
	if b.Per > 0 {
		s += " every " + b.Per.String()
	}
	return s
}
