package policy

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
)

func TestParseSeeds(t *testing.T) {
	for _, f := range []string{"testdata/seed000.yaml", "testdata/seed001.yaml", "testdata/seed001_nested.yaml", "testdata/seed000.json"} {
		t.Run(f, func(t *testing.T) {
			p, warns, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			if len(warns) != 0 {
				t.Errorf("warnings: %v", warns)
			}
			if len(p.Revision()) != 12 {
				t.Errorf("revision %q, want 12 hex digits", p.Revision())
			}
		})
	}
}

func TestDefaultParses(t *testing.T) {
	p, warns, err := Parse(DefaultDocument(), "builtin:default")
	if err != nil || len(warns) != 0 {
		t.Fatalf("built-in policy: %v %v", err, warns)
	}
	if Default().Revision() != p.Revision() {
		t.Errorf("Default() revision %s, parsed %s", Default().Revision(), p.Revision())
	}
}

func TestRevision(t *testing.T) {
	a, _, _ := Parse([]byte("default: ask\n"), "a")
	b, _, _ := Parse([]byte("default: ask\n"), "b")
	c, _, _ := Parse([]byte("default: deny\n"), "c")
	if a.Revision() != b.Revision() || a.Revision() == c.Revision() {
		t.Errorf("revisions %s %s %s: same bytes must match, other bytes differ", a.Revision(), b.Revision(), c.Revision())
	}
}

func TestLoadMissing(t *testing.T) {
	_, _, err := Load("testdata/no-such-policy.yaml")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("got %v, want fs.ErrNotExist", err)
	}
}

func TestParseErrors(t *testing.T) {
	type want struct {
		line  int
		field string
		msg   string
	}
	tests := []struct {
		name string
		doc  string
		want []want
	}{
		{"not yaml", "tools:\n  read: allow\n   bad: [\n", []want{{3, "", "not valid YAML"}}},
		{"not a mapping", "- a\n- b\n", []want{{1, "", "must be a mapping"}}},
		{"unknown top field", "tols:\n  read: allow\n", []want{{1, "tols", "unknown field"}}},
		{"bad action", "tools:\n  read:\n    action: maybe\n", []want{{3, "tools.read.action", "must be allow, ask or deny"}}},
		{"bad default", "default: sometimes\n", []want{{1, "default", "must be allow, ask or deny"}}},
		{"bad security", "exec:\n  security: partial\n", []want{{2, "exec.security", "must be deny, allowlist or full"}}},
		{"bad ask mode", "exec:\n  ask: sometimes\n", []want{{2, "exec.ask", "must be off, on_miss or always"}}},
		{"bad size", "tools:\n  read_file:\n    constraints:\n      max_size: lots\n", []want{{4, "tools.read_file.constraints.max_size", "must be a size"}}},
		{"bad duration", "tools:\n  bash:\n    timeout: soon\n", []want{{3, "tools.bash.timeout", "must be a positive duration"}}},
		{"bad approvers", "tools:\n  bash:\n    approvers: 0\n", []want{{3, "tools.bash.approvers", "at least 1"}}},
		{"bad glob", "tools:\n  read:\n    constraints:\n      denied_paths: [\"a/[b\"]\n", []want{{4, "tools.read.constraints.denied_paths[0]", "bad path pattern"}}},
		{"tilde user", "constraints:\n  denied_paths: [\"~bob/x\"]\n", []want{{2, "constraints.denied_paths[0]", "~user"}}},
		{"unknown kind", "kinds:\n  teleport: deny\n", []want{{2, "kinds.teleport", "unknown kind"}}},
		{"unknown kind in list", "deny: [\"kind:teleport\"]\n", []want{{1, "deny[0]", "unknown kind"}}},
		{"exec field on file tool", "tools:\n  read:\n    safe_bins: [jq]\n", []want{{3, "tools.read.safe_bins", "shell tools"}}},
		{"unknown rule field", "tools:\n  read:\n    actoin: allow\n", []want{{3, "tools.read.actoin", "unknown field"}}},
		{"duplicate key", "tools:\n  read: allow\n  read: deny\n", []want{{3, "tools.read", "defined twice"}}},
		{"list of numbers", "allow: [read, 3, \"\"]\n", []want{{1, "allow[2]", "non-empty string"}}},
		{"bad agent glob", "agents:\n  \"ci-[\":\n    deny: [bash]\n", []want{{2, "agents.ci-[", "bad agent pattern"}}},
		{"unknown overlay field", "agents:\n  ci-*:\n    versoin: 1\n", []want{{3, "agents.ci-*.versoin", "unknown field"}}},
		{"safe bin with a path", "exec:\n  safe_bins: [/bin/jq]\n", []want{{2, "exec.safe_bins[0]", "without spaces or slashes"}}},
		{"version", "version: 2\n", []want{{1, "version", "unsupported version"}}},
		{"several at once", "default: maybe\ntools:\n  read:\n    action: nope\nexec:\n  security: x\n", []want{
			{1, "default", "allow, ask or deny"}, {4, "tools.read.action", "allow, ask or deny"}, {6, "exec.security", "allowlist"}}},
		{"json too", "{\"tools\": {\"read\": {\"action\": \"perhaps\"}}}", []want{{1, "tools.read.action", "must be allow, ask or deny"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _, err := Parse([]byte(tt.doc), "test.yaml")
			if p != nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("got policy %v, error %v; want ErrInvalid", p, err)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not a *ParseError", err)
			}
			if len(pe.Problems) != len(tt.want) {
				t.Fatalf("got %d problems %v, want %d", len(pe.Problems), pe.Problems, len(tt.want))
			}
			for i, w := range tt.want {
				got := pe.Problems[i]
				if got.Line != w.line || got.Field != w.field || !strings.Contains(got.Message, w.msg) {
					t.Errorf("problem %d = %+v, want line %d field %q message containing %q", i, got, w.line, w.field, w.msg)
				}
			}
			if !strings.Contains(err.Error(), "test.yaml:") {
				t.Errorf("error %q does not name the source", err)
			}
		})
	}
}

func TestParseWarnings(t *testing.T) {
	tests := []struct {
		name, doc, field, msg string
	}{
		{"allowed and denied", "allow: [read, bash]\ndeny: [exec]\n", "allow[1]", "deny wins"},
		{"whitelist on a file tool", "tools:\n  read:\n    whitelist: [\"ls *\"]\n", "tools.read", "never match"},
		{"whitelist under deny", "tools:\n  bash:\n    action: deny\n    whitelist: [\"ls *\"]\n", "tools.bash.whitelist", "denies every call"},
		{"same pattern both ways", "tools:\n  bash:\n    whitelist: [\"git push *\"]\n    blacklist: [\"git push *\"]\n", "tools.bash.whitelist[0]", "blacklisted"},
		{"safe bins under deny", "exec:\n  security: deny\n  safe_bins: [jq]\n", "exec.safe_bins[0]", "never matches"},
		{"safe bins under full", "exec:\n  security: full\n  safe_bins: [jq]\n", "exec.safe_bins[0]", "no effect"},
		{"disabled", "enabled: false\nallow: [read]\n", "allow[0]", "denies every tool"},
		{"approvers on deny", "tools:\n  bash:\n    action: deny\n    approvers: 2\n", "tools.bash", "never apply"},
		{"sandbox setting", "exec:\n  enable_sandbox: true\n", "exec.enable_sandbox", "no effect"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, warns, err := Parse([]byte(tt.doc), "w.yaml")
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range warns {
				if w.Field == tt.field && strings.Contains(w.Message, tt.msg) && w.Line > 0 {
					return
				}
			}
			t.Errorf("warnings %v, want one on %s containing %q", warns, tt.field, tt.msg)
		})
	}
}

func TestCanonicalTool(t *testing.T) {
	for in, want := range map[string]string{"read_file": "read", "write_file": "write", "edit_file": "edit", "list_files": "ls",
		"search_files": "grep", "run_shell": "bash", "exec": "bash", "bash": "bash", "glob": "glob", "mcp__github__search": "mcp__github__search"} {
		if got := CanonicalTool(in); got != want {
			t.Errorf("CanonicalTool(%q) = %q, want %q", in, got, want)
		}
	}
}
