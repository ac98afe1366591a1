package policy

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"read", "read", 0}, {"raed", "read", 1}, {"actoin", "action", 1},
		{"wirte", "write", 1}, {"securty", "security", 1}, {"bash", "ls", 3}, {"", "abc", 3}, {"kitten", "sitting", 3},
	}
	for _, tt := range tests {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// TestLintSuggestsUnknownKeys: an unknown key at any level is a problem
// with its line, and a close one gets a "did you mean".
func TestLintSuggestsUnknownKeys(t *testing.T) {
	tests := []struct {
		name, doc string
		line      int
		field     string
		suggest   string // "" = no suggestion
	}{
		{"top level", "defualt: ask\n", 1, "defualt", "default"},
		{"top level camelCase", "version: 1\nconstrains: {}\n", 2, "constrains", "constraints"},
		{"rule", "tools:\n  read:\n    actoin: allow\n", 3, "tools.read.actoin", "action"},
		{"rule list", "tools:\n  bash:\n    whitelsit: [ls]\n", 3, "tools.bash.whitelsit", "whitelist"},
		{"exec", "exec:\n  securty: full\n", 2, "exec.securty", "security"},
		{"constraints", "constraints:\n  denied_path: [x]\n", 2, "constraints.denied_path", "denied_paths"},
		{"agent overlay", "agents:\n  ci-*:\n    denny: [bash]\n", 3, "agents.ci-*.denny", "deny"},
		{"nothing close", "colour: blue\n", 1, "colour", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Parse([]byte(tt.doc), "p.yaml")
			err = Suggest(err)
			var pe *ParseError
			if !errors.As(err, &pe) || len(pe.Problems) != 1 {
				t.Fatalf("want one problem, got %v", err)
			}
			p := pe.Problems[0]
			if p.Line != tt.line || p.Field != tt.field {
				t.Fatalf("problem at line %d field %q, want line %d field %q: %s", p.Line, p.Field, tt.line, tt.field, p)
			}
			hint := "did you mean " + tt.suggest + "?"
			if tt.suggest == "" {
				if strings.Contains(p.Message, "did you mean") {
					t.Fatalf("suggestion for a word close to nothing: %s", p)
				}
			} else if !strings.Contains(p.Message, hint) {
				t.Fatalf("problem lacks %q: %s", hint, p)
			}
			if !strings.Contains(p.Message, "(expected ") {
				t.Fatalf("problem no longer lists the expected keys: %s", p)
			}
			// Suggest is idempotent.
			if again := Suggest(err); strings.Count(again.Error(), "did you mean") != strings.Count(err.Error(), "did you mean") {
				t.Fatalf("Suggest twice added a second hint: %v", again)
			}
		})
	}
}

// TestLintFlagsMisspelledToolNames: a tool name one or two letters from a
// built-in tool is a warning with its line and a suggestion; names of
// other tools are not.
func TestLintFlagsMisspelledToolNames(t *testing.T) {
	doc := `allow: [raed, exce, mcp__github__search, dangerous_tool]
tools:
  wirte: allow
  read_flie: allow
  fetch_url: deny
  bash: {}
agents:
  ci-*:
    deny: [grpe]
`
	_, warns, err := Parse([]byte(doc), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		line    int
		suggest string
	}{
		"allow[0]":            {1, "read"},
		"allow[1]":            {1, "exec"},
		"tools.wirte":         {3, "write"},
		"tools.read_flie":     {4, "read_file"},
		"agents.ci-*.deny[0]": {9, "grep"},
	}
	got := map[string]Warning{}
	for _, w := range warns {
		if strings.Contains(w.Message, "is not a built-in tool") {
			got[w.Field] = w
		}
	}
	if len(got) != len(want) {
		t.Fatalf("got %d tool-name warnings, want %d: %v", len(got), len(want), warns)
	}
	for field, w := range want {
		g, ok := got[field]
		if !ok || g.Line != w.line || !strings.Contains(g.Message, "did you mean "+w.suggest+"?") {
			t.Errorf("%s: got %+v, want line %d suggesting %s", field, g, w.line, w.suggest)
		}
	}
}

// TestExamplePolicy: the shipped sample policy loads, lints clean, and
// holds every key of the language.
func TestExamplePolicy(t *testing.T) {
	const file = "../../deploy/policy.example.yaml"
	p, warns, err := Load(file)
	if err != nil {
		t.Fatal(Suggest(err))
	}
	if len(warns) > 0 {
		t.Fatalf("the sample policy has warnings: %v", warns)
	}
	if p.Revision() == "" {
		t.Fatal("no revision")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	// Every key of the policy language, as written in the sample.
	for _, key := range []string{
		"version:", "name:", "description:", "enabled:", "allow:", "ask:", "deny:", "exec:", "security:",
		"safe_bins:", "confirm_dangerous:", "dangerous_whitelist:", "allowed_directories:", "whitelist:",
		"blacklist:", "tools:", "default:", "action:", "constraints:", "max_size:", "allowed_paths:",
		"denied_paths:", "max_results:", "timeout:", "approvers:", "approval_timeout:", "auto_execute:",
		"kinds:", "agents:",
		"budgets:", "scope:", "max_calls:", "max_time:", "max_concurrent:", "per:", "per_tool:",
		// seed 000's and seed 001's names
		"read_file:", "run_shell:", "search_files:", "[read, write, edit, exec]", "[jq, grep]", "dangerous_tool",
	} {
		if !strings.Contains(doc, key) {
			t.Errorf("the sample policy does not show %s", key)
		}
	}
}
