package policy

import "testing"

func TestToolAction(t *testing.T) {
	doc := `
default: allow
deny: [dangerous_tool, "mcp__evil__*"]
kinds:
  network: deny
tools:
  write: ask
agents:
  "reader-*":
    deny: ["kind:write", bash]
`
	p, _, err := Parse([]byte(doc), "test")
	if err != nil {
		t.Fatal(err)
	}
	g := NewGate(p)
	tests := []struct {
		agent, tool string
		kind        Kind
		want        Action
	}{
		{"a", "read", KindRead, Allow},
		{"a", "write", KindWrite, Ask},
		{"a", "dangerous_tool", KindOther, Deny},
		{"a", "mcp__evil__run", KindExecute, Deny},
		{"a", "mcp__good__run", KindExecute, Allow},
		{"a", "fetch", KindNetwork, Deny},
		{"a", "bash", KindExecute, Allow}, // the commands decide
		{"reader-1", "write", KindWrite, Deny},
		{"reader-1", "edit", KindWrite, Deny},
		{"reader-1", "bash", KindExecute, Deny},
		{"reader-1", "read", KindRead, Allow},
	}
	for _, tt := range tests {
		t.Run(tt.agent+"/"+tt.tool, func(t *testing.T) {
			if got := g.ToolAction(tt.agent, tt.tool, tt.kind); got != tt.want {
				t.Errorf("ToolAction(%s, %s, %s) = %s, want %s", tt.agent, tt.tool, tt.kind, got, tt.want)
			}
		})
	}
	// The built-in default never hides the built-in tools.
	d := NewGate(nil)
	for _, tool := range []string{"read", "write", "edit", "ls", "glob", "grep", "bash"} {
		k, _ := BuiltinKind(tool)
		if a := d.ToolAction("agent", tool, k); a == Deny {
			t.Errorf("default policy denies %s outright", tool)
		}
	}
}
