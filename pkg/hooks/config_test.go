package hooks

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseGoodConfig(t *testing.T) {
	c, err := Parse([]byte(`
redact:
  patterns:
    internal: 'itk_[a-z0-9]{12}'
before:
  - name: pin_cwd
    subject: toolgate.hook.pin_cwd
    timeout: 2s
    tools: [bash]
  - name: audit_only
    subject: toolgate.hook.audit_only
    fail_open: true
after:
  - name: summarise
    subject: toolgate.hook.summarise
`), "hooks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Before) != 2 || c.Before[0].Timeout != 2*time.Second || !c.Before[1].FailOpen || c.Before[0].Tools[0] != "bash" {
		t.Fatalf("before: %+v", c.Before)
	}
	if c.String() != "redaction on; before: 2 (pin_cwd, audit_only); after: 1 (summarise)" {
		t.Fatalf("String() = %q", c.String())
	}
	if _, err := Parse(nil, "empty.yaml"); err != nil {
		t.Fatalf("an empty file: %v", err)
	}
}

// TestParseBadConfigSaysWhereAndWhat: every error names the file and line
// and what is wrong.
func TestParseBadConfigSaysWhereAndWhat(t *testing.T) {
	for _, c := range []struct {
		name, doc, want string
	}{
		{"unknown field", "before:\n  - name: a\n    subjet: toolgate.hook.a\n", "hooks.yaml:3: field subjet not found"},
		{"unknown section", "befor:\n  - name: a\n", "hooks.yaml:1: field befor not found"},
		{"not a list", "before: yes\n", "hooks.yaml:1: cannot unmarshal"},
		{"bad timeout", "after:\n  - name: a\n    subject: x.y\n    timeout: soon\n", "hooks.yaml:4: "},
		{"no name", "before:\n  - subject: toolgate.hook.a\n", "hooks.yaml:2: before[0]: name is missing"},
		{"name with dot", "before:\n  - name: a.b\n    subject: x\n", `hooks.yaml:2: before[0]: name "a.b" is not a subject token`},
		{"reserved name", "after:\n  - name: redact\n", `hooks.yaml:2: after[0]: the name "redact" is the built-in redaction's`},
		{"twice", "before:\n  - name: a\n    subject: x\n  - name: a\n    subject: y\n", `hooks.yaml:4: before[1]: hook "a" is listed twice`},
		{"wildcard subject", "before:\n  - name: a\n    subject: toolgate.hook.*\n", `hooks.yaml:2: before[0] (a): subject "toolgate.hook.*" is not a NATS subject`},
		{"negative timeout", "before:\n  - name: a\n    subject: x\n    timeout: -1s\n", "hooks.yaml:2: before[0] (a): timeout -1s is not between"},
		{"long timeout", "before:\n  - name: a\n    subject: x\n    timeout: 1h\n", "timeout 1h0m0s is not between"},
		{"before hooks too slow together", "before:\n  - {name: a, subject: x, timeout: 15s}\n  - {name: b, subject: y}\n  - {name: c, subject: z, timeout: 1s}\n",
			"hooks.yaml:1: before: the hooks' timeouts add up to 21s (5s each when not set); at most 20s"},
		{"empty tool", "before:\n  - name: a\n    subject: x\n    tools: ['']\n", "tools: an empty tool name"},
		{"bad pattern", "redact:\n  patterns:\n    x: '('\n", "hooks.yaml:1: redact.patterns.x: error parsing regexp"},
		{"empty-matching pattern", "redact:\n  patterns:\n    x: 'a*'\n", "redact.patterns.x: the pattern matches empty text"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc), "hooks.yaml")
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("err = %v, want ErrConfig", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %q\nwant it to say %q", err, c.want)
			}
		})
	}
}

func TestBuildNamesWhatIsMissing(t *testing.T) {
	c, err := Parse([]byte("before:\n  - name: local\n  - name: remote\n    subject: toolgate.hook.remote\n"), "h.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Build(BuildOptions{})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "h.yaml:2: local: no subject, and this program has no in-process hook") ||
		!strings.Contains(err.Error(), "h.yaml:3: remote: a remote hook needs a NATS connection") {
		t.Fatalf("err = %v", err)
	}
}

func TestLoad(t *testing.T) {
	f := filepath.Join(t.TempDir(), "hooks.yaml")
	if err := os.WriteFile(f, []byte("redact:\n  disabled: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(f)
	if err != nil || !c.Redact.Disabled {
		t.Fatalf("Load: %+v %v", c, err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, ErrConfig) {
		t.Fatalf("a missing file: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("before:\n  - name: a\n    subject: toolgate.hook.a\n    timeout: 2s\n"))
	f.Add([]byte("redact:\n  patterns:\n    x: 'y+'\n"))
	f.Add([]byte("after: [{name: b, tools: [read]}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "f.yaml")
		if err != nil {
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "f.yaml") {
				t.Fatalf("error without ErrConfig or the file: %v", err)
			}
			return
		}
		_ = c.String()
	})
}
