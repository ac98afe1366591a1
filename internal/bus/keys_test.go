package bus_test

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/bus"
)

func TestAgentKey(t *testing.T) {
	for _, tc := range []struct {
		name, agent, id string
		want            string // "" means hashed
	}{
		{"safe id kept", "alice", "ok-id_1=", "alice.ok-id_1="},
		{"dot hashed", "alice", "a.b", ""},
		{"wildcard hashed", "alice", "a*", ""},
		{"colon hashed", "alice", "a:b@c", ""},
		{"empty hashed", "alice", "", ""},
		{"long hashed", "alice", strings.Repeat("x", 201), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := bus.AgentKey(tc.agent, tc.id)
			if tc.want != "" {
				if got != tc.want {
					t.Fatalf("AgentKey(%q, %q) = %q, want %q", tc.agent, tc.id, got, tc.want)
				}
				return
			}
			rest, ok := strings.CutPrefix(got, tc.agent+".h")
			if !ok || len(rest) != 32 || strings.ContainsAny(rest, ".*>") {
				t.Fatalf("AgentKey(%q, %q) = %q, want %s.h<32 hex>", tc.agent, tc.id, got, tc.agent)
			}
		})
	}
	if bus.AgentKey("a", "x.y") == bus.AgentKey("a", "x.z") {
		t.Fatal("different unsafe ids share a key")
	}
}
