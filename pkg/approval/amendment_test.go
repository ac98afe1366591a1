package approval

import (
	"errors"
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
		name         string
		tool         string
		args         map[string]any
		prefix, path string
	}{
		{"program and subcommand", "bash", map[string]any{"command": "git push origin main"}, "git push", ""},
		{"stops at a flag", "bash", map[string]any{"command": "rm -rf build"}, "rm", ""},
		{"stops at a path", "bash", map[string]any{"command": "cat ./x"}, "cat", ""},
		{"odd first word kept whole", "bash", map[string]any{"command": "./run.sh now"}, "./run.sh", ""},
		{"file path", "write", map[string]any{"path": "src/a.go", "content": "x"}, "", "src/a.go"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := DefaultScope("bot", tt.tool, tt.args)
			if a.CommandPrefix != tt.prefix || a.PathPattern != tt.path || a.Agent != "bot" || a.Tool != tt.tool {
				t.Fatalf("DefaultScope = %+v, want prefix %q path %q", a, tt.prefix, tt.path)
			}
			a.ID = "x"
			if err := a.ScopedTo("bot", tt.tool, tt.args); err != nil {
				t.Fatalf("default scope is not scoped to its own call: %v", err)
			}
		})
	}
}
