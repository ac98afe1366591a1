package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// Gate judges requests against a policy. It is safe for concurrent use;
// Set swaps the policy atomically (hot reload).
type Gate struct {
	pol   atomic.Pointer[Policy]
	amend atomic.Pointer[[]compiledAmendment]
	roots sync.Map // absolute path → resolvedRoot
	bins  sync.Map // program name → real path of the system binary ("" if none)
}

// Interface guards.
var (
	_ Evaluator   = (*Gate)(nil)
	_ PathChecker = (*Gate)(nil)
)

// NewGate returns a gate judging by p (Default() when p is nil).
func NewGate(p *Policy) *Gate {
	g := &Gate{}
	g.Set(p)
	return g
}

// Set replaces the policy; evaluations already running finish with the old
// one. A nil policy means Default().
func (g *Gate) Set(p *Policy) {
	if p == nil {
		p = Default()
	}
	g.pol.Store(p)
}

// Policy returns the policy in force.
func (g *Gate) Policy() *Policy { return g.pol.Load() }

// item is one finding of an evaluation; the strictest decides.
type item struct {
	action    Action
	rule      string
	reason    string
	offending string
	hard      bool     // a reason no amendment covers
	argv      []string // for shell commands: the argv judged
	toolLevel bool     // the tool-level verdict (lists, rules, default)
}

type evaluation struct {
	g      *Gate
	p      *Policy
	req    Request
	tool   string
	kind   Kind
	known  bool
	layers []*layer
	items  []item
	ws     string   // resolved workspace, "" when none
	wsSegs []string // folded
	exec   *effExec
	paths  []string // resolved paths a file tool was judged on
	// statPath and statSize remember the last file judged.
	statPath string
	statSize int64
	// rendered is a shell command as it runs, once judged (hasRendered).
	rendered    string
	hasRendered bool
	// programs are the system programs the shell command runs.
	programs []string
	// writeAny: the shell command runs a program whose writes the gate
	// cannot name; writes are the real paths it was judged to write;
	// outside are the real paths outside every root it names (an ask).
	writeAny bool
	writes   []string
	outside  []string
}

// Evaluate judges req. It never panics and fails closed: anything that
// goes wrong while judging is a deny naming the cause.
func (g *Gate) Evaluate(ctx context.Context, req Request) (d Decision) {
	p := g.pol.Load()
	defer func() {
		if r := recover(); r != nil {
			d = Decision{Action: Deny, Reason: fmt.Sprintf("policy evaluation failed: %v", r), Rule: "builtin.fail_closed", Revision: p.revision}
		}
	}()
	if err := ctx.Err(); err != nil {
		return Decision{Action: Deny, Reason: "policy evaluation cancelled: " + err.Error(), Rule: "builtin.fail_closed", Revision: p.revision}
	}
	e := g.begin(p, req)
	e.run()
	return e.decide()
}

func (g *Gate) begin(p *Policy, req Request) *evaluation {
	e := &evaluation{g: g, p: p, req: req, tool: CanonicalTool(req.Tool), kind: req.Kind, known: req.Known}
	if e.kind == "" {
		if k, ok := BuiltinKind(e.tool); ok && req.Known {
			e.kind = k
		}
	}
	e.layers = p.layersFor(req.Agent)
	if req.Workspace != "" {
		if ws, err := g.rootOf(req.Workspace); err == nil {
			e.ws, e.wsSegs = ws.real, ws.segs
		}
	}
	return e
}

func (e *evaluation) add(it item) { e.items = append(e.items, it) }

func (e *evaluation) deny(rule, reason, offending string) {
	e.add(item{action: Deny, rule: rule, reason: reason, offending: offending, hard: true})
}

// hardAsk records a reason that can never be allow: ask, or deny when the
// ask mode is off.
func (e *evaluation) hardAsk(rule, reason, offending string) {
	a := Ask
	if e.askMode() == AskOff {
		a = Deny
	}
	e.add(item{action: a, rule: rule, reason: reason, offending: offending, hard: true})
}

func (e *evaluation) run() {
	tl := e.toolLevel()
	if tl != nil {
		e.items = append(e.items, *tl)
		if tl.action == Deny {
			return
		}
	}
	switch {
	case !e.known:
	case isShellTool(e.tool):
		e.shell()
	case isFileTool(e.tool):
		e.fileTool()
	case e.kind == KindNetwork:
		e.networkTool()
	}
}

// worst returns the index of the strictest item (the first among equals).
func worst(items []item) int {
	best := -1
	for i := range items {
		if best < 0 || items[i].action.Rank() > items[best].action.Rank() {
			best = i
		}
	}
	return best
}

func (e *evaluation) decide() Decision {
	d := Decision{Revision: e.p.revision}
	i := worst(e.items)
	if i < 0 {
		// Nothing said anything: the tool is allowed by its rules and the
		// analysis found nothing.
		d.Action, d.Reason, d.Rule = Allow, "allowed: no rule asks or denies", "builtin.allow"
	} else {
		it := e.items[i]
		d.Action, d.Reason, d.Rule, d.Offending = it.action, it.reason, it.rule, it.offending
		if d.Action == Allow && len(e.items) > 1 {
			// Report the rule that allowed the most specific part.
			for j := len(e.items) - 1; j >= 0; j-- {
				if !e.items[j].toolLevel {
					d.Reason, d.Rule, d.Offending = e.items[j].reason, e.items[j].rule, e.items[j].offending
					break
				}
			}
		}
	}
	if d.Action == Allow {
		d.Paths = e.paths
		d.Programs = e.programs
	}
	if d.Action == Ask && e.known {
		a, rest := e.amendment()
		if rest != nil && rest.action == Ask {
			d.Reason, d.Rule, d.Offending = rest.reason, rest.rule, rest.offending
		}
		if a != nil {
			d.Action = Allow
			d.Rule = amendmentRule + a.ID + "]"
			d.Reason = "allowed by an amendment"
			if a.CreatedBy != "" {
				d.Reason += " granted by " + a.CreatedBy
			}
			if a.Reason != "" {
				d.Reason += ": " + a.Reason
			}
		}
	}
	d.Command, d.Rendered = e.rendered, e.hasRendered
	if e.hasRendered && d.Action != Deny {
		d.Access = e.access()
	}
	e.limits(&d)
	return d
}

// systemBinary returns the real path of the program name found on the
// system PATH, or "".
func (g *Gate) systemBinary(name string) string {
	if v, ok := g.bins.Load(name); ok {
		return v.(string)
	}
	real := ""
	if p, err := exec.LookPath(name); err == nil && filepath.IsAbs(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			real = r
		}
	}
	g.bins.Store(name, real)
	return real
}

// stringArg returns a string argument; numbers (json.Number) are not strings.
func stringArg(args map[string]any, name string) (string, bool, error) {
	v, ok := args[name]
	if !ok || v == nil {
		return "", false, nil
	}
	switch s := v.(type) {
	case string:
		return s, true, nil
	case json.Number:
		return "", true, fmt.Errorf("argument %s must be a string, not a number", name)
	}
	return "", true, fmt.Errorf("argument %s must be a string, not %T", name, v)
}
