package toolctl

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/teststack"
)

// TestHookFollowsThePushedPolicy: `toolctl hook claude|codex` judges by
// the policy an admin pushed to the fleet, verified as workers verify
// it, not by the built-in default: a pushed `read: deny` denies a read
// the built-in policy allows.
func TestHookFollowsThePushedPolicy(t *testing.T) {
	ws := teststack.NewWorkspace(t)
	teststack.WriteFile(t, filepath.Join(ws, "README.md"), "hello\n")
	w := teststack.StartWorker(t, ws, nil)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	teststack.WriteFile(t, pol, "tools:\n  default: allow\n  read:\n    action: deny\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	if code := Run(ctx, []string{"--nats", w.URL, "policy", "push", pol}, &out, &errOut); code != ExitOK {
		t.Fatalf("policy push: %d %s", code, &errOut)
	}
	payload, _ := json.Marshal(map[string]any{"session_id": "s", "cwd": ws, "hook_event_name": "PreToolUse",
		"tool_name": "Read", "tool_input": map[string]any{"file_path": filepath.Join(ws, "README.md")}})
	defer func(r io.Reader) { hookStdin = r }(hookStdin)
	for _, mode := range []string{"claude", "codex"} {
		out.Reset()
		errOut.Reset()
		hookStdin = bytes.NewReader(payload)
		if code := Run(ctx, []string{"--nats", w.URL, "hook", mode, "--no-ask"}, &out, &errOut); code != ExitOK {
			t.Fatalf("hook %s: exit %d %s", mode, code, &errOut)
		}
		if !strings.Contains(out.String(), `"permissionDecision":"deny"`) || !strings.Contains(out.String(), "tools.read") {
			t.Errorf("hook %s answered %s (stderr %s), want the pushed policy's deny", mode, &out, &errOut)
		}
		if strings.Contains(errOut.String(), "not signed") {
			t.Errorf("hook %s refused the pushed policy: %s", mode, &errOut)
		}
	}
}
