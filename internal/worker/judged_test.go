package worker

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/pkg/policy"
)

// TestWireJudgedRemovesSecrets: the audit keeps the gate's view of a call
// without the secrets the redaction removes, built-in formats and the
// worker's own alike, and marks such a view redacted.
func TestWireJudgedRemovesSecrets(t *testing.T) {
	own := "worker-own-secret-value"
	w := &Worker{cfg: Config{Redact: func(s string) (string, []string) {
		if strings.Contains(s, own) {
			return strings.ReplaceAll(s, own, "[REDACTED:worker-credential]"), []string{"worker-credential"}
		}
		return s, nil
	}}}
	tests := []struct {
		name     string
		in       policy.Judged
		secret   string
		redacted bool
	}{
		{"plain command", policy.Judged{Workspace: "/ws", Command: "ls -la"}, "", false},
		{"bearer token", policy.Judged{Command: "curl -H 'Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345' https://x"}, "abcdefghijklmnopqrstuvwxyz012345", true},
		{"github token in a path", policy.Judged{Path: "ghp_" + strings.Repeat("a", 36) + ".txt"}, "ghp_" + strings.Repeat("a", 36), true},
		{"the worker's own secret", policy.Judged{Command: "echo " + own}, own, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := w.wireJudged(&tt.in)
			if out.Redacted != tt.redacted {
				t.Errorf("redacted %v, want %v: %+v", out.Redacted, tt.redacted, out)
			}
			if tt.secret != "" && (strings.Contains(out.Command, tt.secret) || strings.Contains(out.Path, tt.secret)) {
				t.Errorf("the secret is kept: %+v", out)
			}
			if !tt.redacted && (out.Command != tt.in.Command || out.Workspace != tt.in.Workspace) {
				t.Errorf("view changed: %+v", out)
			}
		})
	}
	if w.wireJudged(nil) != nil {
		t.Error("no view became one")
	}
}
