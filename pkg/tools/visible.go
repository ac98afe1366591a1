package tools

import "github.com/toolgate/toolgate/pkg/policy"

// DeniedOutright reports whether the gate denies every call of t by agent,
// whatever its arguments: such a tool is left out of the agent's listings.
// With a gate that cannot judge tools alone, nothing is hidden; calls are
// judged anyway.
func (p *Pipeline) DeniedOutright(agent string, t *Tool) bool {
	j, ok := p.gate.(policy.ToolJudge)
	if !ok {
		return false
	}
	return j.ToolAction(agent, t.Name, t.Kind) == policy.Deny
}
