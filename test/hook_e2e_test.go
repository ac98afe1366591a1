package test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/approver"
)

// hookPayload is a Claude Code PreToolUse payload for a Bash command.
func hookPayload(cwd, command string) []byte {
	b, _ := json.Marshal(map[string]any{
		"session_id": "8f0a1c2e-3b4d-4e5f-9a6b-7c8d9e0f1a2b", "cwd": cwd, "permission_mode": "default",
		"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_use_id": "toolu_01AbCdEf2345GhIjKlMnOpQr",
		"tool_input": map[string]any{"command": command, "description": "run it"},
	})
	return b
}

type hookAnswer struct {
	HookSpecificOutput struct {
		PermissionDecision       string `json:"permissionDecision"`
		PermissionDecisionReason string `json:"permissionDecisionReason"`
	} `json:"hookSpecificOutput"`
}

// TestHookAsksPeopleThroughTheApprover runs the built `toolctl hook
// claude` as Claude Code runs a command hook: a forbidden command is
// denied at once, and a command the policy asks about waits for a real
// approval in the approver, then is allowed (or, rejected, denied) and
// never run by the worker.
func TestHookAsksPeopleThroughTheApprover(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "toolctl")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/toolctl").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	s := startApprovalStack(t) // a worker and an approver on one bus
	cwd := t.TempDir()
	run := func(command string) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command(bin, "--nats", s.worker.url, "hook", "claude", "--agent", "claude-code")
		cmd.Stdin = bytes.NewReader(hookPayload(cwd, command))
		out := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = out, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, out
	}
	decode := func(out *bytes.Buffer) hookAnswer {
		var a hookAnswer
		if err := json.Unmarshal(out.Bytes(), &a); err != nil {
			t.Fatalf("hook output %q: %v", out, err)
		}
		return a
	}

	cmd, out := run("sudo rm -rf /var/lib/app")
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if a := decode(out); a.HookSpecificOutput.PermissionDecision != "deny" || !strings.Contains(a.HookSpecificOutput.PermissionDecisionReason, "sudo") {
		t.Fatalf("sudo: %+v", a)
	}

	// A command the policy asks about is published as a judge-only bash
	// call: a person approves it in the approver as any call, the hook
	// answers allow, and the worker never runs it (the agent does).
	// Run by the worker, its touch would leave the marker in the
	// worker's workspace.
	const command = "touch MARKER && git push origin main"
	marker := filepath.Join(s.worker.ws, "MARKER")
	ask := func(verb, body string) hookAnswer {
		t.Helper()
		cmd, out := run(command)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var list []approver.View
		eventually(t, "the call in the approver", func() (bool, string) {
			list = nil
			s.api(t, "GET", "/api/approvals", "", &list)
			return len(list) == 1, "nothing pending"
		})
		if list[0].Tool != "bash" || !strings.Contains(string(list[0].Arguments), "git push origin main") || list[0].Question != nil {
			t.Errorf("the person sees %+v", list[0])
		}
		select {
		case err := <-done:
			t.Fatalf("the hook answered before anyone decided: %v %s", err, out)
		default:
		}
		var res approver.Result
		if code := s.api(t, "POST", "/api/approvals/"+list[0].CallID+"/"+verb, body, &res); code != http.StatusOK {
			t.Fatalf("%s = %d %+v", verb, code, res)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(90 * time.Second):
			t.Fatal("the hook never answered")
		}
		return decode(out)
	}
	noMarker := func() {
		t.Helper()
		if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the worker ran an approved judge-only call: %s: %v", marker, err)
		}
	}
	a := ask("approve", `{}`)
	noMarker()
	if a.HookSpecificOutput.PermissionDecision != "allow" || !strings.Contains(a.HookSpecificOutput.PermissionDecisionReason, "alice") {
		t.Fatalf("after approval: %+v", a)
	}
	if a := ask("reject", `{"reason":"not on main"}`); a.HookSpecificOutput.PermissionDecision != "deny" || !strings.Contains(a.HookSpecificOutput.PermissionDecisionReason, "not on main") {
		t.Fatalf("after rejection: %+v", a)
	}
	noMarker()
}

// TestHookWithoutTheBus judges by a policy file when no NATS server is
// reachable: allows and denies are answered, an ask is denied since no
// person can be asked.
func TestHookWithoutTheBus(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "toolctl")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/toolctl").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, "default: ask\ntools:\n  bash: {}\nexec:\n  confirm_dangerous: true\n")
	cwd := t.TempDir()
	for _, tt := range []struct{ command, want string }{
		{"ls -la", "allow"},
		{"sudo reboot", "deny"},
		{"git push", "deny"}, // an ask nobody can answer
	} {
		cmd := exec.Command(bin, "--nats", "nats://127.0.0.1:1", "hook", "claude", "--policy", pol)
		cmd.Stdin = bytes.NewReader(hookPayload(cwd, tt.command))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v", tt.command, err)
		}
		var a hookAnswer
		if err := json.Unmarshal(out, &a); err != nil || a.HookSpecificOutput.PermissionDecision != tt.want {
			t.Errorf("%s: %s, want %s", tt.command, out, tt.want)
		}
	}
}
