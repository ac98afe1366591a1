package tooldef_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tooldef"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/bash"
	"github.com/toolgate/toolgate/pkg/tools/builtin"
	"github.com/toolgate/toolgate/pkg/tools/web"
)

var update = flag.Bool("update", false, "rewrite docs/TOOLS.md")

// registered returns the built-in tools as a worker registers them.
func registered(t *testing.T) map[string]*tools.Tool {
	t.Helper()
	ws := t.TempDir()
	skills := t.TempDir()
	reg := tools.NewRegistry()
	if err := builtin.Register(reg, builtin.Config{Workspace: ws, SkillsDir: skills}); err != nil {
		t.Fatal(err)
	}
	sh, err := bash.New(bash.Config{Workspace: ws, Sandbox: bash.ModeOff})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(sh); err != nil {
		t.Fatal(err)
	}
	if err := web.Register(reg, web.Config{Search: web.SearchConfig{APIKey: "unused"}}); err != nil {
		t.Fatal(err)
	}
	out := map[string]*tools.Tool{}
	for _, tl := range reg.List() {
		out[tl.Name] = tl
	}
	return out
}

// TestToolsAgreeWithTheirDefinitions: every built-in tool registers under
// its definition's name, aliases and kind, with a schema whose argument
// names, types and required list are the definition's; every definition
// has its tool; and the gate knows each name, alias and kind the same way.
func TestToolsAgreeWithTheirDefinitions(t *testing.T) {
	reg := registered(t)
	for _, d := range tooldef.All() {
		t.Run(d.Name, func(t *testing.T) {
			tl, ok := reg[d.Name]
			if !ok {
				t.Fatalf("no built-in tool is registered as %s", d.Name)
			}
			if !slices.Equal(tl.Aliases, d.Aliases) {
				t.Errorf("aliases %v, definition %v", tl.Aliases, d.Aliases)
			}
			if string(tl.Kind) != d.Kind {
				t.Errorf("kind %s, definition %s", tl.Kind, d.Kind)
			}
			var s struct {
				Properties map[string]struct {
					Type string `json:"type"`
				} `json:"properties"`
				Required             []string `json:"required"`
				AdditionalProperties *bool    `json:"additionalProperties"`
			}
			if err := json.Unmarshal(tl.Parameters, &s); err != nil {
				t.Fatalf("schema: %v", err)
			}
			for n, p := range s.Properties {
				a := d.ArgNamed(n)
				if a == nil {
					t.Errorf("schema argument %s is not in the definition", n)
					continue
				}
				if p.Type != string(a.Type) {
					t.Errorf("argument %s: schema type %s, definition %s", n, p.Type, a.Type)
				}
			}
			for _, a := range d.Args {
				if _, ok := s.Properties[a.Name]; !ok {
					t.Errorf("definition argument %s is not in the schema", a.Name)
				}
			}
			req := d.Required()
			sort.Strings(req)
			got := slices.Clone(s.Required)
			sort.Strings(got)
			if !slices.Equal(got, req) {
				t.Errorf("schema requires %v, definition %v", s.Required, d.Required())
			}
			if s.AdditionalProperties == nil || *s.AdditionalProperties {
				t.Error("the schema allows arguments it does not name")
			}
			for _, n := range d.Names() {
				if k, ok := policy.BuiltinKind(n); !ok || string(k) != d.Kind {
					t.Errorf("the gate takes %s for kind %q (%v), definition %s", n, k, ok, d.Kind)
				}
				if c := policy.CanonicalTool(n); c != d.Name {
					t.Errorf("the gate takes %s for %s", n, c)
				}
			}
		})
	}
	for name, tl := range reg {
		if tl.Category == "builtin" || tl.Category == "" {
			if _, ok := tooldef.Lookup(name); !ok {
				t.Errorf("built-in tool %s has no definition", name)
			}
		}
	}
}

// TestGateJudgesTheArgumentsTheSchemaNames: for every tool with a path
// argument, the gate denies a denied path given under the name the tool's
// schema has for it, and for the shell tool it judges the command its
// schema names, and the URL of a network tool against the allowlist (the
// policy names no host): what the policy knows of the arguments is what the tools
// take.
func TestGateJudgesTheArgumentsTheSchemaNames(t *testing.T) {
	reg := registered(t)
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "secret"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "secret", "key"), []byte("k\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, _, err := policy.Parse([]byte("tools:\n  default: allow\nconstraints:\n  denied_paths: [\"secret/**\", \"secret\"]\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	g := policy.NewGate(p)
	for _, d := range tooldef.All() {
		tl := reg[d.Name]
		var props struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if err := json.Unmarshal(tl.Parameters, &props); err != nil {
			t.Fatal(err)
		}
		judged := map[tooldef.Role]string{tooldef.Path: "secret/key", tooldef.Command: "cat secret/key",
			tooldef.PathPattern: filepath.Join(ws, "secret") + "/*", tooldef.URL: "https://not-allowed.example/"}
		for role, value := range judged {
			a := d.Arg(role)
			if a == nil {
				continue
			}
			if _, ok := props.Properties[a.Name]; !ok {
				t.Errorf("%s: the gate judges argument %s, which the schema does not have", d.Name, a.Name)
				continue
			}
			args := map[string]any{}
			for _, r := range d.Args {
				if r.Required && r.Type == tooldef.String {
					args[r.Name] = "x"
				}
			}
			args[a.Name] = value
			dec := g.Evaluate(context.Background(), policy.Request{Agent: "a", Tool: d.Name, Known: true, Kind: policy.Kind(d.Kind), Arguments: args, Workspace: ws})
			if dec.Action != policy.Deny {
				t.Errorf("%s with %s=%q: %s (%s), want deny", d.Name, a.Name, value, dec.Action, dec.Reason)
			}
		}
	}
}

// TestReference: docs/TOOLS.md is the reference made from the
// definitions; -update rewrites it.
func TestReference(t *testing.T) {
	file := filepath.Join("..", "..", "docs", "TOOLS.md")
	want := tooldef.Reference()
	if *update {
		if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/tooldef -run Reference -args -update)", err)
	}
	if string(got) != want {
		t.Errorf("docs/TOOLS.md is stale: run go test ./pkg/tooldef -run Reference -args -update")
	}
}

// TestReadmeListsTheTools: the README's table of tools names every
// built-in tool with its aliases and kind, as the definitions do.
func TestReadmeListsTheTools(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)`(?: \\(([^)]*)\\))? \\| ([a-z]+) \\|")
	seen := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		d, ok := tooldef.Lookup(m[1])
		if !ok || d.Name != m[1] {
			continue
		}
		seen[d.Name] = true
		var aliases []string
		for _, a := range strings.Split(m[2], ",") {
			if a = strings.Trim(strings.TrimSpace(a), "`"); a != "" {
				aliases = append(aliases, a)
			}
		}
		if !slices.Equal(aliases, d.Aliases) || m[3] != d.Kind {
			t.Errorf("README lists %s with aliases %v and kind %s; its definition has %v and %s", d.Name, aliases, m[3], d.Aliases, d.Kind)
		}
	}
	for _, d := range tooldef.All() {
		if !seen[d.Name] {
			t.Errorf("the README's table of tools does not list %s", d.Name)
		}
	}
}
