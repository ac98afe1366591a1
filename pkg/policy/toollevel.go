package policy

import "fmt"

// ToolJudge is implemented by evaluators that can judge a tool by its name
// and kind alone, before any argument is seen. Listings use it to hide the
// tools an agent could never call.
type ToolJudge interface {
	ToolAction(agent, tool string, kind Kind) Action
}

var _ ToolJudge = (*Gate)(nil)

// ToolAction is the verdict on tool itself for agent: the lists, tool and
// kind rules, the default and the ask mode, without looking at arguments.
// Deny means every call of the tool by agent is denied; allow or ask mean
// the arguments may still decide. A panic while judging is a deny.
func (g *Gate) ToolAction(agent, tool string, kind Kind) (a Action) {
	defer func() {
		if r := recover(); r != nil {
			a = Deny
		}
	}()
	p := g.pol.Load()
	if p == nil {
		return Deny
	}
	e := g.begin(p, Request{Agent: agent, Tool: tool, Known: true, Kind: kind})
	it := e.toolLevel()
	if it == nil {
		return Allow
	}
	switch it.action {
	case Allow, Ask, Deny:
		return it.action
	}
	panic(fmt.Sprintf("unknown action %q", it.action))
}
