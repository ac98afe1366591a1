package policy

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestBudgetsParse(t *testing.T) {
	doc := `tools: {default: allow}
budgets:
  hourly:
    max_calls: 500
    max_time: 10m
    per: 1h
  session-bash:
    scope: session
    agents: ["ci-*", worker-1]
    tools: [run_shell]
    per_tool: true
    max_concurrent: 2
`
	p, warns, err := Parse([]byte(doc), "budgets.yaml")
	if err != nil || len(warns) != 0 {
		t.Fatalf("parse: %v %v", err, warns)
	}
	want := []Budget{
		{Name: "hourly", Scope: ScopeAgent, MaxCalls: 500, MaxTime: 10 * time.Minute, Per: time.Hour, Line: 3},
		{Name: "session-bash", Scope: ScopeSession, Agents: []string{"ci-*", "worker-1"}, Tools: []string{"bash"}, PerTool: true, MaxConcurrent: 2, Line: 7},
	}
	if got := p.Budgets(); !reflect.DeepEqual(got, want) {
		t.Fatalf("budgets\n got %+v\nwant %+v", got, want)
	}
	sb := p.Budgets()[1]
	for _, tc := range []struct {
		agent, tool string
		want        bool
	}{
		{"ci-7", "bash", true}, {"ci-7", "exec", true}, {"worker-1", "bash", true},
		{"ci-7", "read", false}, {"alice", "bash", false},
	} {
		if got := sb.Applies(tc.agent, tc.tool); got != tc.want {
			t.Errorf("Applies(%s, %s) = %v", tc.agent, tc.tool, got)
		}
	}
	start, resets := p.Budgets()[0].Window(time.Date(2026, 11, 23, 14, 37, 5, 0, time.UTC))
	if !start.Equal(time.Date(2026, 11, 23, 14, 0, 0, 0, time.UTC)) || !resets.Equal(time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)) {
		t.Errorf("window %s .. %s", start, resets)
	}
	if s, r := sb.Window(time.Now()); !s.IsZero() || !r.IsZero() {
		t.Errorf("a budget without per has a window: %s %s", s, r)
	}
}

func TestBudgetsRefuseBadValues(t *testing.T) {
	tests := []struct {
		name, doc string
		line      int
		field     string
		msg       string
	}{
		{"no limit", "budgets:\n  b:\n    per: 1h\n", 2, "budgets.b", "sets no limit"},
		{"zero calls", "budgets:\n  b:\n    max_calls: 0\n", 3, "budgets.b.max_calls", "at least 1"},
		{"negative concurrency", "budgets:\n  b:\n    max_concurrent: -2\n", 3, "budgets.b.max_concurrent", "at least 1"},
		{"words for calls", "budgets:\n  b:\n    max_calls: many\n", 3, "budgets.b.max_calls", "whole number"},
		{"bad time", "budgets:\n  b:\n    max_time: soon\n", 3, "budgets.b.max_time", "positive duration"},
		{"window too long", "budgets:\n  b:\n    max_calls: 1\n    per: 2000h\n", 4, "budgets.b.per", "at most"},
		{"bad scope", "budgets:\n  b:\n    scope: planet\n    max_calls: 1\n", 3, "budgets.b.scope", "agent or session"},
		{"unknown key", "budgets:\n  b:\n    max_call: 1\n", 3, "budgets.b.max_call", "unknown field"},
		{"bad name", "budgets:\n  \"two words\":\n    max_calls: 1\n", 2, "budgets.two words", "letters, digits"},
		{"bad agent pattern", "budgets:\n  b:\n    agents: [\"[\"]\n    max_calls: 1\n", 3, "budgets.b.agents", "bad agent pattern"},
		{"not a mapping", "budgets: [a, b]\n", 1, "budgets", "must be a mapping"},
		{"twice", "budgets:\n  b:\n    max_calls: 1\n  b:\n    max_calls: 2\n", 4, "budgets.b", "defined twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse([]byte(tc.doc), "p.yaml")
			var pe *ParseError
			if !errors.As(err, &pe) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want a *ParseError", err)
			}
			for _, p := range pe.Problems {
				if p.Line == tc.line && p.Field == tc.field && strings.Contains(p.Message, tc.msg) {
					return
				}
			}
			t.Fatalf("no problem at line %d, field %s, saying %q: %v", tc.line, tc.field, tc.msg, pe.Problems)
		})
	}
}

func TestBudgetsWarnings(t *testing.T) {
	_, warns, err := Parse([]byte("budgets:\n  b:\n    tools: [bsah]\n    max_concurrent: 1\n    per: 1h\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, w := range warns {
		msgs = append(msgs, w.String())
	}
	all := strings.Join(msgs, "\n")
	if !strings.Contains(all, "did you mean bash") || !strings.Contains(all, "per has no effect") && !strings.Contains(all, "has no effect") {
		t.Fatalf("warnings: %s", all)
	}
}

func TestBudgetString(t *testing.T) {
	b := Budget{Name: "x", Scope: ScopeSession, MaxCalls: 3, MaxTime: time.Minute, MaxConcurrent: 2, Per: time.Hour}
	if got := b.String(); got != "3 calls, 1m0s of execution, 2 at once per session every 1h0m0s" {
		t.Errorf("String() = %q", got)
	}
}

// FuzzBudgets: any budgets section is parsed or refused with problems,
// never a panic, and what is accepted is within the rules.
func FuzzBudgets(f *testing.F) {
	for _, s := range []string{
		"hourly: {max_calls: 5, per: 1h}",
		"s: {scope: session, max_concurrent: 2, tools: [exec], per_tool: true}",
		"t: {max_time: 90, agents: ['ci-*']}",
		"x: {max_calls: -1}", "[1, 2]", "y: {per: 9999999h, max_calls: 1}", "z: &a {max_calls: 1}\nw: *a",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, section string) {
		doc := "budgets:\n  " + strings.ReplaceAll(section, "\n", "\n  ") + "\n"
		p, _, err := Parse([]byte(doc), "fuzz")
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || len(pe.Problems) == 0 {
				t.Fatalf("error without problems: %v", err)
			}
			return
		}
		for _, b := range p.Budgets() {
			if b.MaxCalls < 0 || b.MaxConcurrent < 0 || b.MaxTime < 0 || b.Per < 0 || b.Per > MaxBudgetWindow ||
				b.MaxCalls == 0 && b.MaxConcurrent == 0 && b.MaxTime == 0 || !budgetName().MatchString(b.Name) ||
				b.Scope != ScopeAgent && b.Scope != ScopeSession {
				t.Fatalf("accepted %+v from %q", b, doc)
			}
		}
	})
}
