package test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"mvdan.cc/sh/v3/syntax"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy"
	pshell "github.com/toolgate/toolgate/pkg/policy/shell"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// The differential test generates shell command lines from the grammar -
// mvdan/sh's printer over random syntax trees built from the programs the
// policy knows, their options and the abbreviations of those options,
// payloads that write marker files, and the shell's compound forms - and
// judges each with the built-in policy and with a policy that runs every
// command the analysis has nothing against. Whatever a gate allows without
// a person is run in the bubblewrap sandbox against a canary workspace
// (and a canary directory outside it), and the test asserts that nothing
// changed but what the decision allowed: the files the command line
// redirects its output to and the paths the analysis judged as writes. The count is bounded, not the time; the seed
// is fixed unless TOOLGATE_DIFF_SEED says otherwise, and
// TOOLGATE_DIFF_COUNT raises the count. Command lines that once broke the
// gate are kept in testdata/gate_differential.txt and run first.

// vocabulary: each entry is a program and the words it may be given.
type program struct {
	name  string
	words []string // options, option values, operands
}

var vocabulary = []program{
	{"cat", []string{"-n", "-A", "--number", "--show-a", "main.go", "sub/a.txt", "notes.txt", "../outside/canary.txt", "/etc/hostname"}},
	{"ls", []string{"-la", "-R", "--all", "-d", ".", "sub", "out", "../outside"}},
	{"grep", []string{"-r", "-n", "-R", "--der", "--dereference-r", "-e", "package", "-f", "main.go", "--fil=main.go", "--file", "-o", "--include=*.go", "x", "main.go", "."}},
	{"sed", []string{"-n", "-e", "--expr=1e touch pwned", "--exp", "1e touch pwned", "-i", "--in-place", "--in-pl", "-E", "--sandbox", "-s", "p", "1d", "s/a/b/", "s/a/b/w pwned", "s/a/b/e", "1r main.go", "w pwned", "main.go", "-ie", "-ne"}},
	{"sort", []string{"-r", "-n", "-o", "pwned", "--outp=pwned", "--output", "-u", "--compress-program=./evil.sh", "--compress=./evil.sh", "-S", "1", "-rom", "-ropwned", "main.go", "sub/a.txt", "--batch-size=2"}},
	{"bash", []string{"-c", "-l", "-i", "--login", "--rcfile", "env.sh", "true", "evil.sh", "-x"}},
	{"head", []string{"-n", "1", "-c", "5", "main.go"}},
	{"tail", []string{"-n", "1", "main.go"}},
	{"wc", []string{"-l", "-c", "main.go", "--files0-from=main.go"}},
	{"uniq", []string{"-c", "main.go", "pwned"}},
	{"awk", []string{"{print $1}", `BEGIN{system("touch pwned")}`, `--so=BEGIN{system("touch pwned")}`, "--source", `{print > "pwned"}`, "-F:", "main.go"}},
	{"find", []string{".", "sub", "-name", "x", "-type", "f", "-delete", "-fprint", "pwned", "-exec", "touch", "pwned", ";", "-maxdepth", "1"}},
	{"git", []string{"status", "diff", "log", "-1", "--output=pwned", "--outp=pwned", "-C", "sub", "-c", "core.pager=touch pwned", "grep", "--open=touch", "x"}},
	{"rg", []string{"-n", "--pre=touch", "--pre", "-L", "--files", "x", "main.go"}},
	{"echo", []string{"hi", "-n", "$(touch pwned)", "a[$(touch pwned)]"}},
	{"printf", []string{"-v", "a[$(touch pwned)]", "x", "%s\n", "-vb"}},
	{"test", []string{"-v", "a[$(touch pwned)]", "-e", "main.go", "-R"}},
	{"read", []string{"-r", "a[$(touch pwned)]", "x"}},
	{"declare", []string{"a[$(touch pwned)]=1", "-p", "x"}},
	{"unset", []string{"a[$(touch pwned)]", "-v", "x"}},
	{"true", nil},
	{"pwd", nil},
	{"date", []string{"+%s", "--se=2020-01-01", "-s"}},
	{"xxd", []string{"main.go", "pwned", "-r"}},
	{"du", []string{"-s", "."}},
	{"stat", []string{"main.go"}},
	{"md5sum", []string{"main.go"}},
	{"touch", []string{"pwned", "main.go", ".git/hooks/pre-commit"}},
	{"rm", []string{"-f", "-r", "--no-preserve-root", "main.go", "sub", ".", ".git/config"}},
	{"cp", []string{"main.go", "pwned", "-r", "-t", ".git/hooks", "--target-directory=.git", "sub", ".git/config", ".", "-T"}},
	{"mv", []string{"main.go", "pwned", ".git/hooks/pre-commit", "-t", "sub"}},
	{"ln", []string{"-s", "-f", "main.go", ".git/hooks/pre-commit", "sub"}},
	{"tee", []string{"pwned", "-a", ".git/config"}},
	{"mkdir", []string{"pwned", "-p", ".git/hooks/x"}},
	{"cd", []string{"sub", ".git", ".git/hooks", "..", "-P"}},
	{"git", []string{"config", "core.hooksPath", "x", "--get", "user.name", "init", "-q"}},
	{"go", []string{"build", "-o", ".git/hooks/pre-commit", "./...", "test", "-coverprofile=.git/config"}},
	{"tar", []string{"-cf", "pwned", "-xf", "-C", ".git", "main.go"}},
	{"declare", []string{"-a", "a=($(touch pwned))", "x=(y)", "-p"}},
}

// wrappers run the command after them.
var wrapperWords = [][]string{
	{"env"}, {"env", "-C", "sub"}, {"env", "--ch=sub"}, {"env", "-i"}, {"env", "LC_ALL=C"}, {"env", "foo=bar"},
	{"timeout", "5"}, {"nice", "-n", "5"}, {"command"}, {"builtin"}, {"xargs"}, {"bash", "-c"}, {"bash", "-lc"}, {"sh", "-c"},
	{"bash", "--login", "-c"}, {"bash", "-ic"}, {"bash", "--log", "-c"}, {"exec", "-l"}, {"exec", "-a", "-bash"},
	{"env", "BASH_ENV=env.sh"}, {"env", "ENV=env.sh"}, {"env", "-S"},
}

type generator struct {
	r *rand.Rand
}

func lit(s string) *syntax.Word {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r == '/' || r == '=' || r == ',' || r == ':' || r == '+' || r == '%' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
	}) < 0 {
		return &syntax.Word{Parts: []syntax.WordPart{&syntax.Lit{Value: s}}}
	}
	if !strings.Contains(s, "'") {
		return &syntax.Word{Parts: []syntax.WordPart{&syntax.SglQuoted{Value: s}}}
	}
	return &syntax.Word{Parts: []syntax.WordPart{&syntax.DblQuoted{Parts: []syntax.WordPart{&syntax.Lit{Value: strings.ReplaceAll(s, `"`, `\"`)}}}}}
}

// call builds one simple command, sometimes wrapped, sometimes with an
// assignment in front.
func (g *generator) call(depth int) *syntax.Stmt {
	p := vocabulary[g.r.Intn(len(vocabulary))]
	args := []*syntax.Word{lit(p.name)}
	for n := g.r.Intn(4); n > 0 && len(p.words) > 0; n-- {
		args = append(args, lit(p.words[g.r.Intn(len(p.words))]))
	}
	ce := &syntax.CallExpr{Args: args}
	switch g.r.Intn(10) {
	case 0:
		w := wrapperWords[g.r.Intn(len(wrapperWords))]
		if last := w[len(w)-1]; last == "-S" || (strings.HasPrefix(last, "-") && strings.HasSuffix(last, "c")) {
			// The inner command line as one string.
			inner := print(&syntax.File{Stmts: []*syntax.Stmt{{Cmd: ce}}})
			ce = &syntax.CallExpr{Args: append(wordsOf(w), lit(strings.TrimSpace(inner)))}
		} else {
			ce.Args = append(wordsOf(w), ce.Args...)
		}
	case 1:
		names := []string{"LC_ALL", "foo", "npm_config_script_shell", "BASH_ENV", "TZ", "ENV", "PROMPT_COMMAND", "PS4"}
		values := []string{"x", "env.sh", "./evil.sh", "$(touch pwned)"}
		ce.Assigns = []*syntax.Assign{{Name: &syntax.Lit{Value: names[g.r.Intn(len(names))]}, Value: lit(values[g.r.Intn(len(values))])}}
	}
	st := &syntax.Stmt{Cmd: ce}
	if depth < 2 && g.r.Intn(8) == 0 {
		// A command substitution as one more argument.
		inner := g.stmt(depth + 1)
		ce.Args = append(ce.Args, &syntax.Word{Parts: []syntax.WordPart{&syntax.CmdSubst{Stmts: []*syntax.Stmt{inner}}}})
	}
	if g.r.Intn(6) == 0 {
		targets := []string{"out.txt", "pwned", "sub/out.txt", "/dev/null", "../outside/canary.txt", "main.go", ".git/config", ".git/hooks/pre-commit"}
		ops := []syntax.RedirOperator{syntax.RdrOut, syntax.AppOut, syntax.RdrIn}
		st.Redirs = append(st.Redirs, &syntax.Redirect{Op: ops[g.r.Intn(len(ops))], Word: lit(targets[g.r.Intn(len(targets))])})
	}
	return st
}

func wordsOf(ss []string) []*syntax.Word {
	out := make([]*syntax.Word, len(ss))
	for i, s := range ss {
		out[i] = lit(s)
	}
	return out
}

// stmt builds a statement: a simple command or a compound of them.
func (g *generator) stmt(depth int) *syntax.Stmt {
	if depth >= 2 {
		return g.call(depth)
	}
	switch g.r.Intn(8) {
	case 0:
		ops := []syntax.BinCmdOperator{syntax.AndStmt, syntax.OrStmt, syntax.Pipe}
		return &syntax.Stmt{Cmd: &syntax.BinaryCmd{Op: ops[g.r.Intn(len(ops))], X: g.stmt(depth + 1), Y: g.stmt(depth + 1)}}
	case 1:
		return &syntax.Stmt{Cmd: &syntax.Subshell{Stmts: []*syntax.Stmt{g.stmt(depth + 1)}}}
	case 2:
		return &syntax.Stmt{Cmd: &syntax.Block{Stmts: []*syntax.Stmt{g.stmt(depth + 1), g.stmt(depth + 1)}}}
	}
	return g.call(depth)
}

func (g *generator) script() string {
	f := &syntax.File{}
	for n := 1 + g.r.Intn(2); n > 0; n-- {
		f.Stmts = append(f.Stmts, g.stmt(0))
	}
	return strings.TrimSpace(print(f))
}

func print(f *syntax.File) string {
	var b bytes.Buffer
	if err := syntax.NewPrinter(syntax.Minify(false)).Print(&b, f); err != nil {
		return ""
	}
	return strings.ReplaceAll(b.String(), "\n", "; ")
}

// canary builds the workspace and the directory beside it afresh.
func canary(t *testing.T, ws, outside string) {
	t.Helper()
	for _, d := range []string{ws, outside} {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(d, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	writeFile(t, filepath.Join(ws, "main.go"), "package main\n\nfunc main() {}\n")
	writeFile(t, filepath.Join(ws, "sub", "a.txt"), "a\nb\na\n")
	writeFile(t, filepath.Join(ws, "notes.txt"), "notes\n")
	writeFile(t, filepath.Join(outside, "canary.txt"), "outside\n")
	// Startup files and a script: a login or interactive shell, BASH_ENV or
	// a program told to run the script leaves pwned-* behind.
	for _, f := range []string{".profile", ".bash_profile", ".bashrc", "env.sh"} {
		writeFile(t, filepath.Join(ws, f), "touch pwned-startup 2>/dev/null\n")
	}
	writeFile(t, filepath.Join(ws, "evil.sh"), "#!/bin/sh\ntouch pwned-evil\n")
	if err := os.Chmod(filepath.Join(ws, "evil.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ws, ".git", "config"), "[core]\n\trepositoryformatversion = 0\n")
	writeFile(t, filepath.Join(ws, ".git", "HEAD"), "ref: refs/heads/main\n")
	if err := os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	openUp(t, ws)
	openUp(t, outside)
}

// snapshot maps every path under the roots to what it holds.
func snapshot(t *testing.T, roots ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				out[p] = "error " + err.Error()
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return nil
			}
			v := fi.Mode().String()
			switch {
			case fi.Mode()&os.ModeSymlink != 0:
				target, _ := os.Readlink(p)
				v += " -> " + target
			case fi.Mode().IsRegular():
				b, _ := os.ReadFile(p)
				v += fmt.Sprintf(" %x", sha256.Sum256(b))
			}
			out[p] = v
			return nil
		})
	}
	return out
}

// allowedWrites are the paths an allowed command line may change: the
// files its redirections write and the paths the analysis says its
// commands write (for a directory, anything under it). A change anywhere
// else is a write the gate did not see.
func allowedWrites(ws, command string) []string {
	var out []string
	s, err := pshell.Parse(command)
	if err != nil {
		return out
	}
	// Relative paths resolve against the working directory and every
	// directory the command line may change into, as the gate resolves them.
	bases := []string{ws}
	for _, d := range s.Dirs {
		if d.Literal {
			if filepath.IsAbs(d.Value) {
				bases = append(bases, d.Value)
			} else {
				bases = append(bases, filepath.Join(ws, d.Value))
			}
		}
	}
	add := func(p string) {
		if p == "" {
			return
		}
		if filepath.IsAbs(p) {
			out = append(out, filepath.Clean(p))
			return
		}
		for _, b := range bases {
			out = append(out, filepath.Join(b, p))
		}
	}
	for _, r := range s.Redirects {
		if r.Write && r.Target.Literal {
			add(r.Target.Value)
		}
	}
	for _, c := range s.Commands {
		for _, pa := range c.Paths {
			if pa.Write {
				add(pa.Path)
			}
		}
	}
	return out
}

// covered reports whether p is one of the allowed paths or lies under one.
func covered(p string, allowed []string) bool {
	for _, a := range allowed {
		if p == a || strings.HasPrefix(p, a+"/") {
			return true
		}
	}
	return false
}

func TestGateDifferential(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	seed := int64(1)
	if v, err := strconv.ParseInt(os.Getenv("TOOLGATE_DIFF_SEED"), 10, 64); err == nil {
		seed = v
	}
	count := 300
	if v, err := strconv.Atoi(os.Getenv("TOOLGATE_DIFF_COUNT")); err == nil && v > count {
		count = v
	}
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	ws, outside := filepath.Join(root, "ws"), filepath.Join(root, "outside")
	for _, d := range []string{ws, outside} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	bash, err := bash.New(bash.Config{Workspace: ws, Sandbox: bash.ModeRequire})
	if err != nil {
		t.Fatal(err)
	}
	// The built-in policy, and one that runs every command the analysis
	// finds nothing against and allows writes: under it the test checks
	// the analysis's own view of what a command writes.
	full, _, err := policy.Parse([]byte("tools:\n  write: allow\n  edit: allow\nexec:\n  security: full\n"), "full")
	if err != nil {
		t.Fatal(err)
	}
	gates := []*policy.Gate{policy.NewGate(policy.Default()), policy.NewGate(full)}
	run := func(command string) {
		args, _ := json.Marshal(map[string]any{"command": command, "timeout": 10000})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = bash.Handler.Handle(ctx, &tools.Call{Name: "bash", Arguments: args})
	}
	// Nothing a person did not approve may change the repository's
	// configuration or hooks, predicted or not; git itself may write its
	// objects, refs, index and sample hooks.
	protected := func(p string) bool {
		rel, err := filepath.Rel(filepath.Join(ws, ".git"), p)
		if err != nil || strings.HasPrefix(rel, "..") {
			return false
		}
		return rel == "config" || rel == "info/attributes" || (strings.HasPrefix(rel, "hooks/") && !strings.HasSuffix(rel, ".sample"))
	}
	// Caches programs keep under HOME, which is the workspace here: go's
	// build and module caches and telemetry counters.
	cache := []string{filepath.Join(ws, ".cache", "go-build"), filepath.Join(ws, ".config", "go", "telemetry"), filepath.Join(ws, "go", "pkg", "mod")}
	changed := func(before, after map[string]string, allowed []string) []string {
		allowed = append(allowed, cache...)
		var diff []string
		for p, v := range after {
			if p == filepath.Join(ws, ".cache") || p == filepath.Join(ws, ".config") || p == filepath.Join(ws, ".config", "go") ||
				p == filepath.Join(ws, "go") || p == filepath.Join(ws, "go", "pkg") {
				if _, was := before[p]; !was && strings.HasPrefix(v, "d") {
					continue // the directories of the caches above
				}
			}
			if before[p] != v && (!covered(p, allowed) || protected(p)) {
				diff = append(diff, p)
			}
		}
		for p := range before {
			if _, ok := after[p]; !ok && (!covered(p, allowed) || protected(p)) {
				diff = append(diff, p+" (removed)")
			}
		}
		sort.Strings(diff)
		return diff
	}

	// The harness sees a change when one happens.
	canary(t, ws, outside)
	before := snapshot(t, ws, outside)
	run("touch pwned")
	if d := changed(before, snapshot(t, ws, outside), nil); len(d) != 1 || !strings.HasSuffix(d[0], "pwned") {
		t.Fatalf("the sandboxed touch pwned changed %v; the harness cannot see effects", d)
	}

	var commands []string
	if f, err := os.Open("testdata/gate_differential.txt"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
				commands = append(commands, l)
			}
		}
		f.Close()
	}
	g := &generator{r: rand.New(rand.NewSource(seed))}
	for len(commands) < count {
		if c := g.script(); c != "" {
			commands = append(commands, c)
		}
	}
	ran := 0
	for _, c := range commands {
		for _, gate := range gates {
			d := gate.Evaluate(context.Background(), policy.Request{Agent: "fuzz", Tool: "bash", Known: true, Kind: policy.KindExecute,
				Arguments: map[string]any{"command": c}, Workspace: ws})
			if d.Action != policy.Allow {
				continue
			}
			ran++
			canary(t, ws, outside)
			before := snapshot(t, ws, outside)
			run(c)
			if diff := changed(before, snapshot(t, ws, outside), allowedWrites(ws, c)); len(diff) > 0 {
				t.Errorf("policy %s allowed %q (%s), which changed %v\nkeep it: add it to test/testdata/gate_differential.txt and, with its decision, to pkg/policy/testdata/shell_corpus.txt",
					gate.Policy().Revision(), c, d.Rule, diff)
			}
		}
	}
	t.Logf("seed %d: %d command lines, %d allowed and run in the sandbox", seed, len(commands), ran)
	if ran == 0 {
		t.Fatal("the gate allowed none of the generated command lines: the test compared nothing")
	}
}
