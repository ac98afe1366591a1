package test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/toolctl"
)

// TestToolsInEveryFormat asks a worker for the tool definitions of every
// API through toolctl, as a user pastes them into a model request.
func TestToolsInEveryFormat(t *testing.T) {
	w := startProcess(t, newWorkspace(t), nil)
	tests := []struct {
		format string
		name   func(m map[string]any) string
	}{
		{"openai", func(m map[string]any) string { return m["function"].(map[string]any)["name"].(string) }},
		{"anthropic", func(m map[string]any) string { return m["name"].(string) }},
		{"mcp", func(m map[string]any) string { return m["name"].(string) }},
		{"gemini", func(m map[string]any) string {
			return m["functionDeclarations"].([]any)[0].(map[string]any)["name"].(string)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			out, errOut, code := w.toolctl(t, "tools", "--format", tt.format)
			if code != toolctl.ExitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var defs []map[string]any
			if err := json.Unmarshal([]byte(out), &defs); err != nil || len(defs) == 0 {
				t.Fatalf("output is not a list of definitions: %v\n%s", err, out)
			}
			if tt.name(defs[0]) != "bash" || !strings.Contains(out, `"read"`) {
				t.Errorf("first definition %v; want the sorted built-in tools", defs[0])
			}
		})
	}
	if _, errOut, code := w.toolctl(t, "tools", "--format", "cohere"); code != toolctl.ExitUsage || !strings.Contains(errOut, "unknown tool format") {
		t.Errorf("--format cohere: exit %d %s", code, errOut)
	}
}
