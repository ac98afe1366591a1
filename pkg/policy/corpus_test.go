package policy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	file := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("%s differs at line %d:\n got: %s\nwant: %s\n(run go test -update if the change is intended)", file, i+1, g, w)
			}
		}
	}
}

// fixture builds a home and a workspace with the links the corpora use, and
// returns the workspace. HOME points at the temp home.
func fixture(t *testing.T) (ws, home string) {
	t.Helper()
	root := t.TempDir()
	home = filepath.Join(root, "home")
	ws = filepath.Join(root, "ws")
	t.Setenv("HOME", home)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{home + "/.ssh", ws + "/sub", ws + "/KEYS", ws + "/certs", ws + "/.git/hooks", ws + "/secrets", ws + "/deploy"} {
		must(os.MkdirAll(d, 0o755))
	}
	for _, f := range []string{home + "/.ssh/id_rsa", home + "/secret.pem", ws + "/main.go", ws + "/sub/a.txt", ws + "/KEYS/prod.Key",
		ws + "/certs/server.PEM", ws + "/secrets/server.pem", ws + "/deploy/prod.KEY", ws + "/.git/config"} {
		must(os.WriteFile(f, []byte("data\n"), 0o644))
	}
	must(os.Symlink(home+"/.ssh/id_rsa", ws+"/notes.txt"))
	must(os.Symlink(home+"/.ssh", ws+"/link_ssh"))
	must(os.Symlink("/etc", ws+"/link_etc"))
	must(os.Symlink("..", ws+"/dotdot"))
	must(os.Symlink("main.go", ws+"/safe_link"))
	must(os.Symlink("loop2", ws+"/loop1"))
	must(os.Symlink("loop1", ws+"/loop2"))
	must(os.Link(home+"/secret.pem", ws+"/hard.txt"))
	return ws, home
}

func loadPolicy(t *testing.T, file string) *Policy {
	t.Helper()
	p, _, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type corpusLine struct {
	line    int
	policy  string // "" for seed 000, "builtin" for the built-in policy
	verdict Action
	tool    string
	args    map[string]any
	text    string
}

func readCorpus(t *testing.T, file string, shellOnly bool) []corpusLine {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []corpusLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	n := 0
	pol := ""
	for sc.Scan() {
		n++
		l := sc.Text()
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if name, ok := strings.CutPrefix(l, "@policy "); ok {
			// The cases that follow are judged by another policy.
			switch name = strings.TrimSpace(name); name {
			case "seed000":
				pol = ""
			case "builtin", "full":
				pol = name
			default:
				t.Fatalf("%s:%d: unknown policy %q (seed000, builtin or full)", file, n, name)
			}
			continue
		}
		parts := strings.SplitN(l, "\t", 3)
		c := corpusLine{line: n, policy: pol, verdict: Action(parts[0]), text: l}
		switch {
		case shellOnly && len(parts) >= 2:
			cmd := strings.Join(parts[1:], "\t")
			cmd = strings.NewReplacer(`\n`, "\n", `\t`, "\t").Replace(cmd)
			c.tool, c.args = "run_shell", map[string]any{"command": cmd}
		case !shellOnly && len(parts) == 3:
			c.tool = parts[1]
			dec := json.NewDecoder(strings.NewReader(parts[2]))
			dec.UseNumber()
			if err := dec.Decode(&c.args); err != nil {
				t.Fatalf("%s:%d: %v", file, n, err)
			}
		default:
			t.Fatalf("%s:%d: malformed line %q", file, n, l)
		}
		switch c.verdict {
		case Allow, Ask, Deny:
		default:
			t.Fatalf("%s:%d: verdict %q is not allow, ask or deny", file, n, c.verdict)
		}
		out = append(out, c)
	}
	return out
}

func runCorpus(t *testing.T, file string, shellOnly bool, min int) {
	ws, home := fixture(t)
	var out bytes.Buffer
	anon := strings.NewReplacer(ws, "$WS", home, "$HOME")
	// full runs every command no finding holds back and allows writes:
	// what is left to judge is the analysis itself.
	full, _, err := Parse([]byte("tools:\n  write: allow\n  edit: allow\nexec:\n  security: full\n"), "full")
	if err != nil {
		t.Fatal(err)
	}
	gates := map[string]*Gate{"": NewGate(loadPolicy(t, "testdata/seed000.yaml")), "builtin": NewGate(Default()), "full": NewGate(full)}
	lines := readCorpus(t, file, shellOnly)
	if len(lines) < min {
		t.Fatalf("%s holds %d cases, want at least %d", file, len(lines), min)
	}
	for _, c := range lines {
		_, known := BuiltinKind(c.tool)
		g := gates[c.policy]
		d := g.Evaluate(context.Background(), Request{Agent: "agent-1", Tool: c.tool, Known: known, Arguments: c.args, Workspace: ws})
		if d.Action != c.verdict {
			t.Errorf("%s:%d: [%s] %s %v: got %s (%s: %s), want %s", file, c.line, c.policy, c.tool, c.args, d.Action, d.Rule, d.Reason, c.verdict)
		}
		if d.Action != Allow && (d.Rule == "" || d.Reason == "") {
			t.Errorf("%s:%d: %s without rule or reason: %+v", file, c.line, d.Action, d)
		}
		if d.Revision == "" {
			t.Errorf("%s:%d: no revision", file, c.line)
		}
		var args bytes.Buffer
		enc := json.NewEncoder(&args)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(c.args)
		if c.policy != "" {
			fmt.Fprintf(&out, "[%s] ", c.policy)
		}
		fmt.Fprintf(&out, "%s %s  %s %s: %s [%s]\n", c.tool, args.String(), d.Action, d.Rule, anon.Replace(d.Reason), anon.Replace(d.Offending))
	}
	golden(t, strings.TrimSuffix(filepath.Base(file), ".txt")+".golden", out.Bytes())
}

func TestShellCorpus(t *testing.T) { runCorpus(t, "testdata/shell_corpus.txt", true, 200) }

func TestPathCorpus(t *testing.T) { runCorpus(t, "testdata/path_corpus.txt", false, 20) }
