package policy

// lint reports rules that can never match or never take effect.
func (d *decoder) lint(p *Policy) {
	layers := []*layer{p.base}
	for _, o := range p.agents {
		layers = append(layers, o.layer)
	}
	for _, l := range layers {
		if l.enabled != nil {
			for _, e := range l.lists[0] {
				d.warnf(e.line, e.id, "never takes effect: %s denies every tool", l.enabled.id)
			}
		}
		// An allow or ask entry for a tool the same layer (or the base) denies.
		for idx := 0; idx < 2; idx++ {
			for _, e := range l.lists[idx] {
				if e.tool == "" {
					continue
				}
				denying := []*layer{p.base}
				if l != p.base {
					denying = append(denying, l)
				}
				for _, dl := range denying {
					for _, de := range dl.lists[2] {
						if de.matches(e.tool, "") {
							d.warnf(e.line, e.id, "never takes effect: %s denies %s (deny wins)", de.id, e.tool)
						}
					}
				}
			}
		}
		for canon, rules := range l.tools {
			for _, r := range rules {
				if !isShellTool(canon) && (len(r.whitelist) > 0 || len(r.blacklist) > 0) {
					d.warnf(r.line, r.id, "whitelist and blacklist match shell commands; %s is not a shell tool, so they never match", r.name)
				}
				if r.action != nil && r.action.action == Deny {
					if len(r.whitelist) > 0 {
						d.warnf(r.line, r.id+".whitelist", "never matches: the rule denies every call of %s", r.name)
					}
					if r.approvers > 0 || r.approvalTimeout > 0 {
						d.warnf(r.line, r.id, "approvers and approval_timeout never apply: the rule denies, it never asks")
					}
				}
				if isShellTool(canon) {
					for _, w := range r.whitelist {
						for _, b := range r.blacklist {
							if w.raw == b.raw {
								d.warnf(w.line, w.id, "never matches: the same pattern is blacklisted (%s)", b.id)
							}
						}
					}
				}
			}
		}
		x := &l.exec
		for _, r := range l.tools[shellTool] {
			if r.exec.security > x.security {
				x = &r.exec
			}
		}
		if x.security == SecurityDeny {
			for _, r := range l.tools[shellTool] {
				for _, w := range r.whitelist {
					d.warnf(w.line, w.id, "never matches: %s is deny", x.securityID)
				}
			}
			for _, s := range l.exec.safeBins {
				d.warnf(s.line, s.id, "never matches: %s is deny", x.securityID)
			}
		}
		if x.security == SecurityFull {
			for _, s := range l.exec.safeBins {
				d.warnf(s.line, s.id, "has no effect: %s allows every command that is not blacklisted", x.securityID)
			}
		}
	}
	d.lintToolNames(p)
	d.lintNetwork(p)
	if len(p.agents) > 0 {
		seen := map[string]int{}
		for _, o := range p.agents {
			if prev, ok := seen[o.pattern]; ok {
				d.warnf(o.line, "agents."+o.pattern, "same pattern as line %d", prev)
			}
			seen[o.pattern] = o.line
		}
	}
}
