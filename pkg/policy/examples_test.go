package policy

import (
	"errors"
	"strings"
	"testing"
)

func TestExamplesParse(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		// problems are "line N: field: message fragment" prefixes, in
		// order; none means the document is valid.
		problems []string
	}{
		{"passing examples", `
tools: {read: allow, bash: {}}
examples:
  - {tool: read, args: {path: notes.txt}, expect: allow, rule: tools.read.action}
  - {tool: bash, args: {command: "sudo id"}, expect: deny}
`, nil},
		{"a failing example names what it got", `
tools: {read: deny}
examples:
  - {tool: read, args: {path: notes.txt}, expect: allow}
`, []string{"line 4: examples[0]: example read {\"path\":\"notes.txt\"} fails: expected allow, got deny by tools.read.action"}},
		{"the rule must match too", `
tools: {read: allow}
examples:
  - {tool: read, args: {path: a}, expect: allow, rule: tools.write.action}
`, []string{"line 4: examples[0]: example read {\"path\":\"a\"} fails: expected allow by tools.write.action, got allow by tools.read.action"}},
		{"an overlay example defaults to an agent its glob matches", `
tools: {read: allow}
agents:
  ci-*:
    tools: {read: deny}
    examples:
      - {tool: read, args: {path: a}, expect: deny, rule: agents.ci-*.tools.read.action}
examples:
  - {tool: read, args: {path: a}, expect: allow}
`, nil},
		{"an overlay example's agent must match the glob", `
agents:
  ci-*:
    examples:
      - {tool: read, agent: dev-1, expect: allow}
`, []string{`line 5: agents.ci-*.examples[0].agent: "dev-1" does not match the overlay's pattern "ci-*"`}},
		{"malformed expect", `
examples:
  - {tool: read, args: {path: a}, expect: allow}
  - {tool: read, args: {path: a}, expect: maybe}
`, []string{"line 4: examples[1].expect: must be allow, ask or deny"}},
		{"missing tool", `
examples:
  - {args: {path: a}, expect: allow}
`, []string{"line 3: examples[0].tool: is required"}},
		{"missing expect", `
examples:
  - tool: read
`, []string{"line 3: examples[0].expect: is required"}},
		{"args not a mapping", `
examples:
  - {tool: read, args: [a], expect: allow}
`, []string{"line 3: examples[0].args: must be a mapping"}},
		{"unknown field", `
examples:
  - {tool: read, expect: allow, expected: deny}
`, []string{"line 3: examples[0].expected: unknown field"}},
		{"not a list", `
examples: {tool: read}
`, []string{"line 2: examples: must be a list"}},
		{"an example not a mapping", `
examples:
  - read
`, []string{"line 3: examples[0]: an example must be a mapping"}},
		{"examples are not judged when the document is invalid", `
tools: {read: perhaps}
examples:
  - {tool: read, expect: deny}
`, []string{"line 2: tools.read: must be allow, ask or deny"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Parse([]byte(tt.doc), "p.yaml")
			if len(tt.problems) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			var pe *ParseError
			if !errors.As(err, &pe) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not a *ParseError wrapping ErrInvalid", err)
			}
			if len(pe.Problems) != len(tt.problems) {
				t.Fatalf("got %d problems, want %d:\n%v", len(pe.Problems), len(tt.problems), err)
			}
			for i, want := range tt.problems {
				if got := pe.Problems[i].String(); !strings.HasPrefix(got, want) {
					t.Errorf("problem %d:\n got %s\nwant %s...", i, got, want)
				}
			}
		})
	}
}

func TestParseExamplesReportsEveryResult(t *testing.T) {
	doc := `
tools: {read: allow, write: deny}
examples:
  - {tool: read, args: {path: a}, expect: allow}
  - {tool: write, args: {path: a, content: x}, expect: allow}
`
	p, results, _, err := ParseExamples([]byte(doc), "p.yaml")
	if err != nil || p == nil {
		t.Fatalf("ParseExamples: %v", err)
	}
	if len(results) != 2 || !results[0].Pass() || results[1].Pass() {
		t.Fatalf("results %v", results)
	}
	if r := results[1]; r.Got.Action != Deny || r.Got.Rule != "tools.write.action" || r.Example.Line != 5 || r.Example.Index != 1 {
		t.Errorf("failing result %+v", r)
	}
}

func TestDefaultPolicyHasExamples(t *testing.T) {
	p, results, _, err := ParseExamples(DefaultDocument(), "builtin:default")
	if err != nil {
		t.Fatal(err)
	}
	if len(results) < 5 {
		t.Fatalf("the built-in policy documents itself with %d examples", len(results))
	}
	for _, r := range results {
		if !r.Pass() {
			t.Errorf("%s", r)
		}
	}
	if Default().Revision() != p.Revision() {
		t.Errorf("Default() is not the built-in document (revision %s, want %s)", Default().Revision(), p.Revision())
	}
}

func TestAgentFor(t *testing.T) {
	for glob, want := range map[string]string{"ci-*": "ci-a", "bot?": "bota", "team-[xy]*": "team-xa", `a\*b`: "a*b", "[!x]": ""} {
		got, ok := agentFor(glob)
		if got != want || ok != (want != "") {
			t.Errorf("agentFor(%q) = %q, %v; want %q", glob, got, ok, want)
		}
	}
}

// FuzzExamples decodes arbitrary examples lists: Parse never panics, and a
// rejected document always says where.
func FuzzExamples(f *testing.F) {
	for _, s := range []string{
		"examples:\n  - {tool: read, args: {path: a}, expect: allow}\n",
		"examples:\n  - {tool: bash, args: {command: 'sh -c \"ls\"'}, expect: ask, rule: x}\n",
		"agents:\n  'c[i-*':\n    examples: [{tool: read, expect: deny}]\n",
		"examples: [{tool: read, args: {1: [2, {3: 4}]}, expect: deny, agent: ~}]\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		_, _, err := Parse([]byte(doc), "fuzz")
		var pe *ParseError
		if err != nil && (!errors.As(err, &pe) || len(pe.Problems) == 0) {
			t.Fatalf("error without problems: %v", err)
		}
	})
}
