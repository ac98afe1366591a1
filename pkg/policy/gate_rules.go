package policy

import (
	"fmt"
	"path"
)

func (p *Policy) layersFor(agent string) []*layer {
	ls := make([]*layer, 1, 1+len(p.agents))
	ls[0] = p.base
	for _, o := range p.agents {
		if ok, _ := path.Match(o.pattern, agent); ok {
			ls = append(ls, o.layer)
		}
	}
	return ls
}

// limits fills the timeout, approval and size fields from every rule that
// applies to the tool: the shortest timeouts, the most approvers, the
// smallest bounds.
func (e *evaluation) limits(d *Decision) {
	for _, r := range e.rules() {
		if r.timeout > 0 && (d.Timeout == 0 || r.timeout < d.Timeout) {
			d.Timeout = r.timeout
		}
		if d.Action == Ask {
			if r.approvers > d.Approvers {
				d.Approvers = r.approvers
			}
			if r.approvalTimeout > 0 && (d.ApprovalTimeout == 0 || r.approvalTimeout < d.ApprovalTimeout) {
				d.ApprovalTimeout = r.approvalTimeout
			}
		}
		if c := r.constraints; c.maxResults > 0 && (d.MaxResults == 0 || c.maxResults < d.MaxResults) {
			d.MaxResults = c.maxResults
		}
		if c := r.constraints; c.maxSize > 0 && (d.MaxBytes == 0 || c.maxSize < d.MaxBytes) {
			d.MaxBytes = c.maxSize
		}
	}
	if d.Action == Ask && d.Approvers == 0 {
		d.Approvers = 1
	}
}

// rules returns the tool and kind rules that apply to the request.
func (e *evaluation) rules() []*toolRule {
	var out []*toolRule
	for _, l := range e.layers {
		out = append(out, l.tools[e.tool]...)
		if e.kind != "" {
			if r := l.kinds[e.kind]; r != nil {
				out = append(out, r)
			}
		}
	}
	return out
}

var listActions = [3]Action{Allow, Ask, Deny}

func (en *listEntry) matches(tool string, kind Kind) bool {
	switch {
	case en.kind != "":
		return kind != "" && en.kind == kind
	case en.glob != "":
		ok, _ := path.Match(en.glob, tool)
		return ok
	}
	return en.tool == tool
}

// toolLevel is the verdict on the tool itself: lists, tool and kind rules,
// the default, the ask mode for unknown and unlisted tools.
func (e *evaluation) toolLevel() *item {
	return e.toolVerdict(e.tool, e.kind, e.known, e.req.Tool)
}

// toolVerdict judges one tool by name and kind; shown is the name as called.
func (e *evaluation) toolVerdict(tool string, kind Kind, known bool, shown string) *item {
	var best *verdict
	shellRule := false
	allowList := false
	var def *verdict
	for _, l := range e.layers {
		if l.enabled != nil {
			best = stricter(best, l.enabled)
		}
		if len(l.lists[0]) > 0 {
			allowList = true
		}
		for idx, list := range l.lists {
			for i := range list {
				if list[i].matches(tool, kind) {
					best = stricter(best, &verdict{action: listActions[idx], id: list[i].id})
					break
				}
			}
		}
		for _, r := range l.tools[tool] {
			shellRule = true
			if r.action == nil {
				continue
			}
			if isShellTool(tool) && r.action.action != Deny {
				continue // a shell rule's action is its verdict on commands no pattern allows
			}
			best = stricter(best, r.action)
		}
		if kind != "" {
			if r := l.kinds[kind]; r != nil && r.action != nil {
				best = stricter(best, r.action)
			}
		}
		if l.def != nil {
			def = l.def
		}
	}
	if !known {
		if best != nil && best.action == Deny {
			return &item{action: Deny, rule: best.id, reason: fmt.Sprintf("tool %s is denied", shown), toolLevel: true, hard: true}
		}
		if best != nil && best.action == Ask {
			return &item{action: Ask, rule: best.id, reason: fmt.Sprintf("tool %s is not a known tool", shown), toolLevel: true, hard: true}
		}
		return e.askModeItem(fmt.Sprintf("tool %s is not a known tool", shown), true)
	}
	if best != nil {
		return &item{action: best.action, rule: best.id, reason: fmt.Sprintf("tool %s: %s by %s", shown, best.action, best.id), toolLevel: true}
	}
	if isShellTool(tool) && shellRule {
		return nil
	}
	if def != nil {
		return &item{action: def.action, rule: def.id, reason: fmt.Sprintf("tool %s has no rule: default %s", shown, def.action), toolLevel: true}
	}
	if allowList {
		return e.askModeItem(fmt.Sprintf("tool %s is not in the allow list", shown), false)
	}
	if isShellTool(tool) {
		return nil // the built-in command classification decides
	}
	return e.askModeItem(fmt.Sprintf("tool %s has no rule", shown), false)
}

func (e *evaluation) askModeItem(reason string, hard bool) *item {
	x := e.effExec()
	rule := x.askID
	if rule == "" {
		rule = "builtin.ask_mode"
	}
	if x.ask == AskOff {
		return &item{action: Deny, rule: rule, reason: reason + " and the ask mode is off", toolLevel: true, hard: true}
	}
	return &item{action: Ask, rule: rule, reason: reason + ": a person decides", toolLevel: true, hard: hard}
}

func (e *evaluation) askMode() AskMode { return e.effExec().ask }
