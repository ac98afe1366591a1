package approval

import (
	"errors"
	"slices"
	"testing"
)

func TestAmendmentScopedTo(t *testing.T) {
	args := map[string]any{"command": "git push origin main"}
	tests := []struct {
		name string
		a    Amendment
		ok   bool
	}{
		{"exact scope", Amendment{ID: "a1", Agent: "bot", Tool: "bash", CommandPrefix: "git push"}, true},
		{"whole command", Amendment{ID: "a1", Agent: "bot", Tool: "bash", CommandPrefix: "git push origin main"}, true},
		{"no prefix", Amendment{ID: "a1", Agent: "bot", Tool: "bash"}, true},
		{"prefix cut inside a word", Amendment{ID: "a1", Agent: "bot", Tool: "bash", CommandPrefix: "git pu"}, false},
		{"prefix of another command", Amendment{ID: "a1", Agent: "bot", Tool: "bash", CommandPrefix: "rm"}, false},
		{"other agent", Amendment{ID: "a1", Agent: "other", Tool: "bash"}, false},
		{"agent glob", Amendment{ID: "a1", Agent: "*", Tool: "bash"}, false},
		{"other tool", Amendment{ID: "a1", Agent: "bot", Tool: "write"}, false},
		{"bad id", Amendment{ID: "a.b", Agent: "bot", Tool: "bash"}, false},
		{"every path", Amendment{ID: "a1", Agent: "bot", Tool: "bash", PathPattern: "/**"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.a.ScopedTo("bot", "bash", args)
			if tt.ok && err != nil {
				t.Fatalf("ScopedTo: %v", err)
			}
			if !tt.ok && !errors.Is(err, ErrInvalidAmendment) {
				t.Fatalf("ScopedTo = %v, want ErrInvalidAmendment", err)
			}
		})
	}
}

func TestDefaultScope(t *testing.T) {
	tests := []struct {
		name      string
		tool      string
		args      map[string]any
		offending string
		prefix    []string // narrowest first
		path      string
	}{
		{"the whole simple command, then wider", "bash", map[string]any{"command": "git push origin main"}, "",
			[]string{"git push origin main", "git push origin", "git push"}, ""},
		{"never the program alone", "bash", map[string]any{"command": "rm -rf build"}, "", []string{"rm -rf build", "rm -rf"}, ""},
		{"of a list, the first command", "bash", map[string]any{"command": "rm -rf node_modules && npm ci"}, "",
			[]string{"rm -rf node_modules", "rm -rf"}, ""},
		{"of a list, the command the gate stopped at", "bash", map[string]any{"command": "rm -rf node_modules && npm ci"}, "npm ci",
			[]string{"npm ci"}, ""},
		{"a one-word command", "bash", map[string]any{"command": "make"}, "", []string{"make"}, ""},
		{"up to the first word that is not literal", "bash", map[string]any{"command": `cat ./x "$HOME/y" z`}, "", []string{"cat ./x"}, ""},
		{"a quoted word with a space ends the prefix", "bash", map[string]any{"command": `git commit -m "fix it"`}, "",
			[]string{"git commit -m", "git commit"}, ""},
		{"two words: only the whole command", "bash", map[string]any{"command": "./run.sh now"}, "", []string{"./run.sh now"}, ""},
		{"file path", "write", map[string]any{"path": "src/a.go", "content": "x"}, "", []string{""}, "src/a.go"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scopes := Scopes("bot", tt.tool, tt.args, tt.offending)
			var got []string
			for _, a := range scopes {
				got = append(got, a.CommandPrefix)
				if a.PathPattern != tt.path || a.Agent != "bot" || a.Tool != tt.tool {
					t.Fatalf("scope %+v, want path %q", a, tt.path)
				}
				a.ID = "x"
				if err := a.ScopedTo("bot", tt.tool, tt.args); err != nil {
					t.Fatalf("scope %q is not scoped to its own call: %v", a.CommandPrefix, err)
				}
			}
			if !slices.Equal(got, tt.prefix) {
				t.Fatalf("Scopes = %q, want %q", got, tt.prefix)
			}
			if d := DefaultScope("bot", tt.tool, tt.args, tt.offending); d.CommandPrefix != tt.prefix[0] {
				t.Fatalf("DefaultScope = %q, want the narrowest %q", d.CommandPrefix, tt.prefix[0])
			}
		})
	}
}
