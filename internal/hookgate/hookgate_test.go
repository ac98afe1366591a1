package hookgate

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/pkg/policy"
)

var update = flag.Bool("update", false, "rewrite the golden decisions")

// hookPolicy is the policy the payloads are judged by: file tools inside
// the workspace, key files denied, shell commands by their syntax tree
// (dangerous ones ask, forbidden ones are denied), other tools ask.
const hookPolicy = `default: ask
tools:
  read: allow
  write: allow
  edit: allow
  glob: allow
  grep: allow
  ls: allow
  bash: {}
exec:
  ask: on_miss
  confirm_dangerous: true
constraints:
  denied_paths: ["**/*.pem"]
`

func workspace(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "README.md"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(ws, "certs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "certs", "server.pem"), []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	return ws
}

// payload reads a hook payload from testdata, with WORKSPACE replaced.
func payload(t *testing.T, name, ws string) Input {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var in Input
	if err := json.Unmarshal([]byte(strings.ReplaceAll(string(b), "WORKSPACE", ws)), &in); err != nil {
		t.Fatal(err)
	}
	return in
}

// TestDecisionsGolden judges every payload in testdata (Claude Code's and
// Codex's PreToolUse shapes) and compares the decisions with
// testdata/decisions.golden.
func TestDecisionsGolden(t *testing.T) {
	p, _, err := policy.Parse([]byte(hookPolicy), "test")
	if err != nil {
		t.Fatal(err)
	}
	ws := workspace(t)
	j := &Judge{Gate: policy.NewGate(p), Agent: "claude-code"}
	files, _ := filepath.Glob("testdata/*.json")
	var got strings.Builder
	for _, f := range files {
		out := answer(j, filepath.Base(f), payload(t, filepath.Base(f), ws))
		b, _ := json.Marshal(out)
		got.WriteString(filepath.Base(f) + " " + strings.ReplaceAll(string(b), ws, "WORKSPACE") + "\n")
	}
	path := filepath.Join("testdata", "decisions.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update)", err)
	}
	if got.String() != string(want) {
		t.Errorf("decisions differ from %s:\n%s", path, got.String())
	}
}

// answer is what `toolctl hook claude|codex` prints for a payload named
// claude-* or codex-*.
func answer(j *Judge, name string, in Input) Output {
	out := j.Decide(context.Background(), in)
	if strings.HasPrefix(name, "codex-") {
		return Codex(out)
	}
	return out
}

// codexAccepts applies the rules of Codex's PreToolUse output parser
// (openai/codex, codex-rs/hooks: the output schema and the checks that
// mark a hook's answer invalid) to one answer. An invalid answer shows
// up in Codex as a failed hook, never as the decision meant.
func codexAccepts(b []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	for k := range top {
		switch k {
		case "continue", "hookSpecificOutput", "stopReason", "suppressOutput", "systemMessage":
		default:
			return fmt.Errorf("unknown field %q (the schema allows no other)", k)
		}
	}
	if string(top["continue"]) == "false" {
		return errors.New("unsupported continue:false")
	}
	if _, ok := top["stopReason"]; ok {
		return errors.New("unsupported stopReason")
	}
	if string(top["suppressOutput"]) == "true" {
		return errors.New("unsupported suppressOutput")
	}
	raw, ok := top["hookSpecificOutput"]
	if !ok || string(raw) == "null" {
		return nil
	}
	var hs map[string]json.RawMessage
	if err := json.Unmarshal(raw, &hs); err != nil {
		return fmt.Errorf("hookSpecificOutput is not an object: %w", err)
	}
	for k := range hs {
		switch k {
		case "additionalContext", "hookEventName", "permissionDecision", "permissionDecisionReason", "updatedInput":
		default:
			return fmt.Errorf("unknown hookSpecificOutput field %q", k)
		}
	}
	if string(hs["hookEventName"]) != `"PreToolUse"` {
		return fmt.Errorf("hookEventName %s, want \"PreToolUse\" (required)", hs["hookEventName"])
	}
	var decision, reason string
	_ = json.Unmarshal(hs["permissionDecision"], &decision)
	_ = json.Unmarshal(hs["permissionDecisionReason"], &reason)
	_, hasReason := hs["permissionDecisionReason"]
	_, hasUpdated := hs["updatedInput"]
	switch {
	case hasUpdated && decision != "allow":
		return errors.New("updatedInput without permissionDecision:allow")
	case decision == "allow" && !hasUpdated:
		return errors.New("unsupported permissionDecision:allow (without updatedInput)")
	case decision == "ask":
		return errors.New("unsupported permissionDecision:ask")
	case decision == "deny" && strings.TrimSpace(reason) == "":
		return errors.New("permissionDecision:deny without a non-empty permissionDecisionReason")
	case decision == "" && hasReason:
		return errors.New("permissionDecisionReason without permissionDecision")
	case decision != "" && decision != "allow" && decision != "deny":
		return fmt.Errorf("permissionDecision %q is not allow, deny or ask", decision)
	}
	return nil
}

// TestCodexAnswersFollowCodexsParser: every answer `toolctl hook codex`
// gives, the golden ones and those for every ask (no person to ask,
// approved, refused, unreachable), is one Codex's parser accepts, and
// a deny is a deny there.
func TestCodexAnswersFollowCodexsParser(t *testing.T) {
	p, _, err := policy.Parse([]byte(hookPolicy), "test")
	if err != nil {
		t.Fatal(err)
	}
	ws := workspace(t)
	// The answers Claude Code takes, which `hook codex` used to print,
	// are refused: Codex showed every allow as a failed hook and let an
	// ask through.
	j := &Judge{Gate: policy.NewGate(p), Agent: "codex"}
	for _, f := range []string{"codex-bash.json", "codex-bash-push.json"} {
		b, _ := json.Marshal(j.Decide(context.Background(), payload(t, f, ws)))
		if err := codexAccepts(b); err == nil {
			t.Errorf("%s: the rules accept Claude Code's answer %s", f, b)
		}
	}
	files, _ := filepath.Glob("testdata/*.json")
	for _, asker := range []Asker{nil, &fakeAsker{allow: true}, &fakeAsker{}, &fakeAsker{err: errors.New("no NATS")}} {
		j := &Judge{Gate: policy.NewGate(p), Agent: "codex", Asker: asker}
		for _, f := range files {
			in := payload(t, filepath.Base(f), ws)
			plain := j.Decide(context.Background(), in)
			b, _ := json.Marshal(Codex(plain))
			if err := codexAccepts(b); err != nil {
				t.Errorf("%s (asker %v): Codex would refuse %s: %v", filepath.Base(f), asker, b, err)
			}
			if s := plain.HookSpecificOutput; s != nil && s.PermissionDecision != string(policy.Allow) && !strings.Contains(string(b), `"permissionDecision":"deny"`) {
				t.Errorf("%s: %s became %s, want a deny", filepath.Base(f), s.PermissionDecision, b)
			}
		}
	}
}

func TestMultiEditJudgesEveryEdit(t *testing.T) {
	ws := workspace(t)
	reqs, err := Map(payload(t, "claude-multiedit.json", ws))
	if err != nil || len(reqs) != 2 {
		t.Fatalf("Map = %d requests, %v; want one per edit", len(reqs), err)
	}
	for i, want := range [][2]string{{"hello", "hello, world"}, {"world", "there"}} {
		a := reqs[i].Arguments
		if reqs[i].Tool != "edit" || a["old_string"] != want[0] || a["new_string"] != want[1] || a["path"] != filepath.Join(ws, "README.md") {
			t.Errorf("request %d = %s %v, want the edit %q -> %q", i, reqs[i].Tool, a, want[0], want[1])
		}
	}
}

func TestDecisions(t *testing.T) {
	p, _, err := policy.Parse([]byte(hookPolicy), "test")
	if err != nil {
		t.Fatal(err)
	}
	ws := workspace(t)
	j := &Judge{Gate: policy.NewGate(p), Agent: "claude-code"}
	tests := []struct {
		file, want string
	}{
		{"claude-bash-ls.json", "allow"},
		{"claude-bash-sudo.json", "deny"},
		{"claude-bash-push.json", "ask"},
		{"claude-read-readme.json", "allow"},
		{"claude-read-key.json", "deny"},
		{"claude-write-outside.json", "deny"},
		{"claude-edit.json", "allow"},
		{"claude-mcp.json", "ask"},
		{"claude-todowrite.json", ""},
		{"claude-powershell.json", "ask"},
		{"claude-multiedit.json", "allow"},
		{"claude-multiedit-no-edits.json", "deny"},
		// Codex: allow is the empty answer, an ask no one can be asked
		// about is a deny.
		{"codex-bash.json", ""},
		{"codex-bash-push.json", "deny"},
		{"codex-bash-sudo.json", "deny"},
		{"codex-todo.json", ""},
		{"codex-apply-patch-secret.json", "deny"},
		{"codex-bad-input.json", "deny"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			out := answer(j, tt.file, payload(t, tt.file, ws))
			got := ""
			if out.HookSpecificOutput != nil {
				got = out.HookSpecificOutput.PermissionDecision
			}
			if got != tt.want {
				t.Fatalf("decision %q, want %q (%+v)", got, tt.want, out.HookSpecificOutput)
			}
		})
	}
}

// fakeAsker records questions; its answer is fixed. It stands for the
// people behind the approver, which the end-to-end test drives for real.
type fakeAsker struct {
	allow bool
	err   error
	asked []string
}

func (f *fakeAsker) Ask(_ context.Context, _ []policy.Request, q string, _ time.Duration) (bool, string, error) {
	f.asked = append(f.asked, q)
	return f.allow, "alice", f.err
}

func TestAskGoesToPeopleAndFailsClosed(t *testing.T) {
	p, _, _ := policy.Parse([]byte(hookPolicy), "test")
	ws := workspace(t)
	in := payload(t, "claude-bash-push.json", ws)
	for _, tt := range []struct {
		name string
		a    *fakeAsker
		want string
	}{
		{"approved", &fakeAsker{allow: true}, "allow"},
		{"refused", &fakeAsker{}, "deny"},
		{"unreachable", &fakeAsker{err: errors.New("no NATS")}, "deny"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := &Judge{Gate: policy.NewGate(p), Agent: "claude-code", Asker: tt.a}
			out := j.Decide(context.Background(), in)
			if out.HookSpecificOutput.PermissionDecision != tt.want {
				t.Fatalf("decision %+v, want %s", out.HookSpecificOutput, tt.want)
			}
			if len(tt.a.asked) != 1 || !strings.Contains(tt.a.asked[0], "git push origin main") {
				t.Fatalf("asked %q", tt.a.asked)
			}
		})
	}
}

func TestPatchFiles(t *testing.T) {
	got, err := PatchFiles("*** Begin Patch\n*** Update File: a.go\n*** Move to: b/../c.go\n*** Delete File: d.txt\n*** Add File: a.go\n*** End Patch")
	if err != nil || strings.Join(got, ",") != "a.go,c.go,d.txt" {
		t.Fatalf("PatchFiles = %v, %v", got, err)
	}
	for _, bad := range []string{"", "*** Begin Patch\n*** End Patch", "*** Add File:   \n"} {
		if _, err := PatchFiles(bad); !errors.Is(err, ErrBadInput) {
			t.Errorf("PatchFiles(%q) err = %v", bad, err)
		}
	}
}

func FuzzDecide(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.json")
	for _, fn := range files {
		b, _ := os.ReadFile(fn)
		f.Add(b)
	}
	p, _, _ := policy.Parse([]byte(hookPolicy), "test")
	j := &Judge{Gate: policy.NewGate(p), Agent: "fuzz"}
	f.Fuzz(func(t *testing.T, data []byte) {
		var in Input
		if json.Unmarshal(data, &in) != nil {
			return
		}
		in.Cwd = "/nonexistent-fuzz-workspace"
		out := j.Decide(context.Background(), in)
		if s := out.HookSpecificOutput; s != nil {
			switch s.PermissionDecision {
			case "allow", "deny", "ask":
			default:
				t.Fatalf("decision %q", s.PermissionDecision)
			}
		}
		if b, _ := json.Marshal(Codex(out)); codexAccepts(b) != nil {
			t.Fatalf("Codex would refuse %s: %v", b, codexAccepts(b))
		}
	})
}
