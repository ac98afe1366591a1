package policycli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func run(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func writePolicy(t *testing.T, doc string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

const seed000 = "../../pkg/policy/testdata/seed000.yaml"

func TestCheck(t *testing.T) {
	ws := t.TempDir()
	tests := []struct {
		name   string
		args   []string
		action string
		rule   string
	}{
		{"whitelisted", []string{"--tool", "run_shell", "--args", `{"command":"git status"}`}, "allow", "tools.run_shell.whitelist[3]"},
		{"blacklisted inside a compound", []string{"--tool", "run_shell", "--args", `{"command":"ls && rm -rf /"}`}, "deny", "tools.run_shell.blacklist[0]"},
		{"other command", []string{"--tool", "bash", "--args", `{"command":"make"}`}, "ask", "tools.run_shell.action"},
		{"denied path", []string{"--tool", "read_file", "--args", `{"path":"keys/server.pem"}`}, "deny", "tools.read_file.constraints.denied_paths[1]"},
		{"tool without a rule", []string{"--tool", "mcp__x", "--kind", "network"}, "ask", "tools.default"},
		{"unregistered tool", []string{"--tool", "mcp__x", "--unknown"}, "ask", "builtin.ask_mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"check", "--policy", seed000, "--workspace", ws, "--agent", "a1"}, tt.args...)
			code, out, errs := run(args...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %s", code, errs)
			}
			if strings.Count(strings.TrimSpace(out), "\n") != 0 {
				t.Errorf("output is not one line: %q", out)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("output %q: %v", out, err)
			}
			if got["action"] != tt.action || got["rule"] != tt.rule {
				t.Errorf("got %v, want action %s rule %s", got, tt.action, tt.rule)
			}
			for _, k := range []string{"action", "reason", "rule", "offending", "revision"} {
				if _, ok := got[k]; !ok {
					t.Errorf("output lacks %q: %s", k, out)
				}
			}
		})
	}
}

func TestCheckDefaultPolicy(t *testing.T) {
	code, out, _ := run("check", "--workspace", t.TempDir(), "--tool", "bash", "--args", `{"command":"sudo ls"}`)
	if code != 0 || !strings.Contains(out, `"action":"deny"`) || !strings.Contains(out, "builtin.classify.forbidden") {
		t.Errorf("exit %d, output %s", code, out)
	}
}

func TestCheckBrokenPolicy(t *testing.T) {
	f := writePolicy(t, "tools:\n  read:\n    action: perhaps\nexec:\n  security: sometimes\n")
	code, out, errs := run("check", "--policy", f, "--tool", "read", "--args", `{"path":"x"}`)
	if code != 1 || out != "" {
		t.Errorf("exit %d, stdout %q; want 1 and nothing on stdout", code, out)
	}
	for _, want := range []string{f + ":line 3: tools.read.action:", f + ":line 5: exec.security:", "2 problem(s)"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr %q lacks %q", errs, want)
		}
	}
}

func TestCheckUsage(t *testing.T) {
	for _, args := range [][]string{
		{"check", "--args", "{}"},
		{"check", "--tool", "read", "--args", "[1]"},
		{"check", "--tool", "read", "--args", "{} {}"},
		{"check", "--tool", "read", "extra"},
		{"check", "--bogus"},
		{"frobnicate"},
		{},
	} {
		if code, _, errs := run(args...); code != 2 || errs == "" {
			t.Errorf("%q: exit %d, stderr %q; want 2 with a message", args, code, errs)
		}
	}
}

func TestLint(t *testing.T) {
	code, out, _ := run("lint", seed000)
	if code != 0 || !strings.Contains(out, "valid, revision") || !strings.Contains(out, "0 warning(s)") {
		t.Errorf("seed 000: exit %d, %q", code, out)
	}
	f := writePolicy(t, "allow: [read, bash]\ndeny: [bash]\n")
	code, out, _ = run("lint", f)
	if code != 0 || !strings.Contains(out, f+":line 1: warning: allow[1]: never takes effect") || !strings.Contains(out, "1 warning(s)") {
		t.Errorf("warnings: exit %d, %q", code, out)
	}
	f = writePolicy(t, "tools:\n  bash:\n    actoin: ask\n")
	code, _, errs := run("lint", f)
	if code != 1 || !strings.Contains(errs, f+":line 3: tools.bash.actoin: unknown field actoin; did you mean action?") {
		t.Errorf("misspelled key: exit %d, %q", code, errs)
	}
	f = writePolicy(t, "default: perhaps\n")
	code, _, errs = run("lint", f)
	if code != 1 || !strings.Contains(errs, f+":line 1: default: must be allow, ask or deny") {
		t.Errorf("invalid: exit %d, %q", code, errs)
	}
	if code, _, _ := run("lint", filepath.Join(t.TempDir(), "missing.yaml")); code != 1 {
		t.Errorf("missing file: exit %d, want 1", code)
	}
}

func TestDefault(t *testing.T) {
	code, out, _ := run("default")
	if code != 0 || !strings.Contains(out, "confirm_dangerous: true") {
		t.Errorf("exit %d, %q", code, out)
	}
}

// TestCheckNamesThePart: the decision names the word, option or
// redirection that drove it, not only the command it is in.
func TestCheckNamesThePart(t *testing.T) {
	ws := t.TempDir()
	for _, tt := range []struct {
		policy, command, action, offending string
	}{
		{"", "sed --expr='1e id' x", "ask", "--expr=1e id"},
		{"", "cat x && sort --outp=y x", "ask", "--outp=y"},
		{"", "grep --fil=y x z", "ask", "--fil=y"},
		{"", "git log --ext-diff", "ask", "--ext-diff"},
		{"", "printf -v 'a[$(id)]' v", "ask", "a[$(id)]"},
		{"", "npm_config_script_shell=/bin/sh ls", "ask", "npm_config_script_shell=/bin/sh"},
		{"", "bash -lc ls", "ask", "-lc"},
		{seed000, "ls > out.txt", "ask", "> out.txt"},
		{seed000, "ls && rm -rf /", "deny", "rm -rf /"},
		{"", "cat /etc/hostname", "ask", "/etc/hostname"},
	} {
		args := []string{"check", "--workspace", ws, "--tool", "bash", "--args", `{"command":` + strconvQuote(tt.command) + `}`}
		if tt.policy != "" {
			args = append(args, "--policy", tt.policy)
		}
		code, out, errs := run(args...)
		if code != 0 {
			t.Fatalf("%s: exit %d, stderr %s", tt.command, code, errs)
		}
		var got Output
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if string(got.Action) != tt.action || got.Offending != tt.offending {
			t.Errorf("%s: got %s offending %q (%s), want %s offending %q", tt.command, got.Action, got.Offending, got.Reason, tt.action, tt.offending)
		}
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestExamplesTestAndLint(t *testing.T) {
	good := writePolicy(t, "tools: {read: allow}\nexamples:\n  - {tool: read, args: {path: a}, expect: allow}\n")
	bad := writePolicy(t, "tools: {read: allow}\nexamples:\n  - {tool: read, args: {path: a}, expect: allow}\n  - {tool: read, args: {path: b}, expect: deny}\n")
	tests := []struct {
		name     string
		args     []string
		code     int
		out, err []string
	}{
		{"test passes", []string{"test", good}, 0, []string{"ok   " + good + ":line 3: examples[0] passes", "1 example(s), 0 failed"}, nil},
		{"test fails", []string{"test", bad}, 1, []string{"FAIL " + bad + ":line 4: examples[1] fails", "got allow by tools.read.action", "2 example(s), 1 failed"}, nil},
		{"lint fails", []string{"lint", bad}, 1, nil, []string{bad + ":line 4: examples[1]: example read {\"path\":\"b\"} fails: expected deny, got allow by tools.read.action", "nothing was loaded"}},
		{"test of an invalid document", []string{"test", writePolicy(t, "examples: [{tool: read, expect: perhaps}]\n")}, 1, nil, []string{"line 1: examples[0].expect: must be allow, ask or deny"}},
		{"test without examples", []string{"test", writePolicy(t, "default: deny\n")}, 0, []string{"no examples"}, nil},
		{"test usage", []string{"test"}, 2, nil, []string{"usage: policy test FILE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := run(tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", code, tt.code, out, errs)
			}
			for _, w := range tt.out {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tt.err {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errs)
				}
			}
		})
	}
}

func TestDefaultPrintsExamples(t *testing.T) {
	code, out, _ := run("default")
	f := writePolicy(t, out)
	tc, tout, terr := run("test", f)
	if code != 0 || tc != 0 || !strings.Contains(out, "examples:") || strings.Contains(tout, "FAIL") {
		t.Fatalf("default exit %d, test exit %d:\n%s%s", code, tc, tout, terr)
	}
}
