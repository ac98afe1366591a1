package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Example is one call a policy document states the decision of, in its
// examples: list (at the top level, or in an agents.<glob> overlay). Every
// example is judged when the document is parsed, by the same gate the
// workers use: a document whose examples do not come out as written is
// invalid as a whole.
type Example struct {
	// Index is the example's position in its list, Line its line in the
	// document, Field its dotted path (examples[2], agents.ci-*.examples[0]).
	Index int
	Line  int
	Field string
	// Tool is the tool called (aliases accepted).
	Tool string
	// Kind is the tool's kind when it is not built in (default other).
	Kind Kind
	// Agent is the calling agent: as written, else "agent" at the top
	// level and a name the overlay's glob matches in an overlay.
	Agent string
	// Arguments are the call's arguments; paths are relative to the
	// workspace, as in a live call.
	Arguments map[string]any
	// Expect is the action the call must get.
	Expect Action
	// Rule, when set, is the rule that must decide.
	Rule string
}

// ExampleResult is how one example came out.
type ExampleResult struct {
	Example Example
	// Got is the gate's decision on the example.
	Got Decision
}

// Pass reports whether the example came out as written.
func (r ExampleResult) Pass() bool {
	return r.Got.Action == r.Example.Expect && (r.Example.Rule == "" || r.Got.Rule == r.Example.Rule)
}

// String says how the example came out, for a person.
func (r ExampleResult) String() string {
	want := string(r.Example.Expect)
	if r.Example.Rule != "" {
		want += " by " + r.Example.Rule
	}
	verb := "passes"
	if !r.Pass() {
		verb = "fails"
	}
	return fmt.Sprintf("%s %s (%s by %s as %s): expected %s, got %s by %s: %s", r.Example.Field, verb, r.Example.Tool,
		r.Example.Agent, exampleInput(r.Example), want, r.Got.Action, r.Got.Rule, r.Got.Reason)
}

func exampleInput(x Example) string {
	b, err := json.Marshal(x.Arguments)
	if err != nil {
		return "?"
	}
	return string(b)
}

// Examples returns the document's examples in document order.
func (p *Policy) Examples() []Example { return append([]Example(nil), p.examples...) }

// exampleAgent is the agent of a top-level example with none.
const exampleAgent = "agent"

// RunExamples judges every example of p in a fresh, empty workspace and
// returns their results in order.
func (p *Policy) RunExamples() []ExampleResult {
	if len(p.examples) == 0 {
		return nil
	}
	ws, err := os.MkdirTemp("", "toolgate-examples-")
	if err != nil {
		// No workspace: relative paths are denied, which fails the
		// examples that need one rather than passing them on a guess.
		ws = ""
	} else {
		defer os.Remove(ws)
	}
	g := NewGate(p)
	out := make([]ExampleResult, 0, len(p.examples))
	for _, x := range p.examples {
		req := Request{Agent: x.Agent, Tool: x.Tool, Known: true, Kind: x.Kind, Arguments: x.Arguments, Workspace: ws}
		if k, ok := BuiltinKind(CanonicalTool(x.Tool)); ok && req.Kind == "" {
			req.Kind = k
		}
		if req.Kind == "" {
			req.Kind = KindOther
		}
		out = append(out, ExampleResult{Example: x, Got: g.Evaluate(context.Background(), req)})
	}
	return out
}

// checkExamples turns every failing example into a problem.
func (d *decoder) checkExamples(p *Policy) {
	for _, r := range p.RunExamples() {
		if !r.Pass() {
			got := fmt.Sprintf("got %s by %s: %s", r.Got.Action, r.Got.Rule, r.Got.Reason)
			want := string(r.Example.Expect)
			if r.Example.Rule != "" {
				want += " by " + r.Example.Rule
			}
			d.problems = append(d.problems, Problem{Line: r.Example.Line, Field: r.Example.Field,
				Message: fmt.Sprintf("example %s %s fails: expected %s, %s", r.Example.Tool, exampleInput(r.Example), want, got)})
		}
	}
}

// examples decodes an examples: list; glob is the overlay's agent
// pattern ("" at the top level).
func (d *decoder) examples(n *yaml.Node, at, glob string, p *Policy) {
	n = deref(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.errf(n, at, "must be a list of examples ({tool, args, expect}), not %s", kindName(n))
		return
	}
	for i, c := range n.Content {
		name := fmt.Sprintf("%s[%d]", at, i)
		if x, ok := d.example(deref(c), name, glob); ok {
			x.Index = i
			p.examples = append(p.examples, x)
		}
	}
}

func (d *decoder) example(n *yaml.Node, at, glob string) (Example, bool) {
	x := Example{Field: at, Line: n.Line}
	if n.Kind != yaml.MappingNode {
		d.errf(n, at, "an example must be a mapping with tool, args and expect, not %s", kindName(n))
		return x, false
	}
	before := len(d.problems)
	var agentNode *yaml.Node
	for _, f := range d.fields(n, at) {
		name := join(at, f.raw)
		switch f.key {
		case "tool":
			if s, ok := d.str(f.value, name); ok {
				if s = strings.TrimSpace(s); s == "" || strings.ContainsAny(s, " \t\n") {
					d.errf(f.value, name, "a tool name cannot be empty or contain spaces")
				}
				x.Tool = strings.TrimSpace(s)
			}
		case "kind":
			if s, ok := d.str(f.value, name); ok {
				if !validKinds[Kind(s)] {
					d.errf(f.value, name, "unknown kind %q (expected read, write, execute, search, network or other)", s)
				}
				x.Kind = Kind(s)
			}
		case "agent":
			if s, ok := d.str(f.value, name); ok {
				x.Agent, agentNode = s, f.value
			}
		case "args", "arguments":
			x.Arguments = d.exampleArgs(f.value, name)
		case "expect":
			x.Expect, _ = d.action(f.value, name)
		case "rule":
			if s, ok := d.str(f.value, name); ok {
				x.Rule = strings.TrimSpace(s)
			}
		case "description", "name":
			d.str(f.value, name)
		default:
			d.errf(f.kn, name, "unknown field (expected tool, args, agent, kind, expect, rule or description)")
		}
	}
	if x.Tool == "" && len(d.problems) == before {
		d.errf(n, join(at, "tool"), "is required: the tool the example calls")
	}
	if x.Expect == "" && len(d.problems) == before {
		d.errf(n, join(at, "expect"), "is required: allow, ask or deny")
	}
	if x.Arguments == nil {
		x.Arguments = map[string]any{}
	}
	switch {
	case x.Agent != "" && glob != "":
		if ok, _ := path.Match(glob, x.Agent); !ok {
			d.errf(agentNode, join(at, "agent"), "%q does not match the overlay's pattern %q", x.Agent, glob)
		}
	case glob != "":
		a, ok := agentFor(glob)
		if !ok {
			d.errf(n, join(at, "agent"), "is required: no plain name is derived from the pattern %q", glob)
		}
		x.Agent = a
	case x.Agent == "":
		x.Agent = exampleAgent
	}
	return x, len(d.problems) == before
}

// agentFor derives an agent name the glob matches: * and ? become a, a
// class its first listed character.
func agentFor(glob string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(glob); i++ {
		switch c := glob[i]; c {
		case '*', '?':
			b.WriteByte('a')
		case '\\':
			if i+1 < len(glob) {
				i++
				b.WriteByte(glob[i])
			}
		case '[':
			j := strings.IndexByte(glob[i:], ']')
			if j < 0 || i+1 >= len(glob) || glob[i+1] == '^' || glob[i+1] == '!' {
				return "", false
			}
			b.WriteByte(glob[i+1])
			i += j
		default:
			b.WriteByte(c)
		}
	}
	s := b.String()
	ok, _ := path.Match(glob, s)
	return s, ok && s != ""
}

// exampleArgs decodes an example's arguments as a call's JSON arguments
// are decoded (numbers as json.Number).
func (d *decoder) exampleArgs(n *yaml.Node, at string) map[string]any {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return map[string]any{}
	}
	if n.Kind != yaml.MappingNode {
		d.errf(n, at, "must be a mapping of the call's arguments, not %s", kindName(n))
		return nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		d.errf(n, at, "cannot be decoded: %v", err)
		return nil
	}
	raw, err := json.Marshal(jsonable(v))
	if err != nil {
		d.errf(n, at, "cannot be written as JSON arguments: %v", err)
		return nil
	}
	var out map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		d.errf(n, at, "cannot be written as JSON arguments: %v", err)
		return nil
	}
	return out
}

// jsonable turns YAML's map[any]any (non-string keys) into JSON-shaped
// values.
func jsonable(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = jsonable(e)
		}
		return t
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []any:
		for i, e := range t {
			t[i] = jsonable(e)
		}
		return t
	}
	return v
}
