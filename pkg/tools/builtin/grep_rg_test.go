package builtin

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
)

// goSrc is Go's own source tree, the real tree grep is compared on.
func goSrc(t testing.TB) string {
	t.Helper()
	goBin := testenv.LookPath(t, "go", "golang-go")
	out, err := exec.Command(goBin, "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	src := filepath.Join(strings.TrimSpace(string(out)), "src")
	if fi, err := os.Stat(src); err != nil || !fi.IsDir() {
		testenv.Missing(t, "no Go source tree at "+src+": install the Debian package golang-src (apt-get install -y golang-src)")
	}
	return src
}

// rgArgs make ripgrep follow the same rules as grep: .gitignore honoured
// in any tree, no global or .ignore files, no parent directories above the
// workspace, hidden files skipped, symlinks not followed.
var rgArgs = []string{"--no-require-git", "--no-ignore-global", "--no-ignore-parent", "--no-ignore-dot", "--no-ignore-exclude", "--no-config"}

func rgLines(t testing.TB, rg, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command(rg, append(slices.Clone(rgArgs), args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 {
		return nil // no match
	} else if err != nil {
		t.Fatalf("rg %v: %v: %s", args, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "./")
	}
	slices.Sort(lines)
	return lines
}

func TestGrepAgreesWithRipgrep(t *testing.T) {
	rg := testenv.LookPath(t, "rg", "ripgrep")
	src := goSrc(t)
	e := newEnv(t, Config{Workspace: src, MaxOutput: 1 << 24, MaxReadSize: 1 << 30})
	for _, tc := range []struct {
		name, pattern, path string
		extra               map[string]any
		rgExtra             []string
	}{
		{name: "literal", pattern: "func main", path: "cmd/go"},
		{name: "regex", pattern: `^func \(\w+ \*Server\) Serve`, path: "net"},
		{name: "alternation", pattern: `errors\.(Is|As)\(`, path: "os"},
		{name: "case-insensitive", pattern: "copyright 20[01][0-9]", path: "cmd/vendor", extra: map[string]any{"-i": true}, rgExtra: []string{"-i"}},
		{name: "case-insensitive literal", pattern: "license that can be FOUND", path: "crypto", extra: map[string]any{"case_insensitive": true}, rgExtra: []string{"-i"}},
		{name: "inline fold literal", pattern: "(?i)ERRNOTEXIST", path: "os"},
		{name: "fixed string", pattern: "(?i)", path: "regexp", extra: map[string]any{"fixed_string": true}, rgExtra: []string{"-F"}},
		{name: "type go", pattern: "TODO", path: "cmd/vendor", extra: map[string]any{"type": "go"}, rgExtra: []string{"--type", "go"}},
		{name: "glob", pattern: "package", path: "encoding", extra: map[string]any{"glob": "*_test.go"}, rgExtra: []string{"--glob", "*_test.go"}},
		{name: "word boundary", pattern: `\bNUL\b`, path: "internal"},
		{name: "binary files", pattern: "ELF|go1", path: "debug"},
		{name: "gitignored and hidden", pattern: "_obj|\\.o$|unix", path: "cmd/vendor/golang.org/x/sys"},
		{name: "whole tree", pattern: `syscall\.E[A-Z]+\b`, path: "."},
		{name: "no match", pattern: "this string is not anywhere in the tree 7f3a", path: "strings"},
		{name: "anchored end", pattern: `\{$`, path: "bufio"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := map[string]any{"pattern": tc.pattern, "path": tc.path, "output_mode": "files_with_matches"}
			for k, v := range tc.extra {
				args[k] = v
			}
			out := e.ok(t, "grep", args)
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(out.Content), "\n") {
				if l != "" && l != "No matches." {
					got = append(got, l)
				}
			}
			slices.Sort(got)
			want := rgLines(t, rg, src, append(append([]string{"--files-with-matches"}, tc.rgExtra...), "-e", tc.pattern, tc.path)...)
			if !slices.Equal(got, want) {
				t.Fatalf("grep and rg disagree on %q in %s:\nonly grep: %v\nonly rg:   %v", tc.pattern, tc.path, minus(got, want), minus(want, got))
			}
			if len(want) == 0 && tc.name != "no match" {
				t.Fatalf("rg found nothing: the case tests nothing")
			}
			t.Logf("%d files agree", len(got))
		})
	}
}

func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	if len(out) > 10 {
		out = append(out[:10], "...")
	}
	return out
}

// TestMatcherAgreesWithRegexp checks the direct string searches against
// the regular expression they stand for, line by line.
func TestMatcherAgreesWithRegexp(t *testing.T) {
	texts := []string{
		"", "a", "needle", "xxneedle\nNEEDLE\nNeEdLe yy\nneedl\n", "\u212aelvin\nKELVIN\n", "ſtop\nSTOP\nstop",
		"no match here\n", "needleneedle", "\nneedle", "nee\ndle\n",
	}
	for _, tc := range []struct {
		pattern      string
		fixed, icase bool
	}{
		{"needle", false, false}, {"needle", false, true}, {"NEEDLE", true, true}, {"(?i)kelvin", false, false},
		{"stop", false, true}, {"e", false, false}, {"le\nne", true, false}, {"d", true, true}, {"a.b", true, false},
	} {
		m, err := newMatcher(tc.pattern, tc.fixed, tc.icase)
		if err != nil {
			if strings.Contains(tc.pattern, "\n") {
				continue
			}
			t.Fatal(err)
		}
		for _, text := range texts {
			var got, want []int
			mm := m.forBuffer([]byte(text))
			for pos := 0; ; {
				s, e, ok := mm.next([]byte(text), pos)
				if !ok {
					break
				}
				got = append(got, s)
				pos = e + 1
			}
			off := 0
			for _, line := range strings.SplitAfter(text, "\n") {
				if m.re.MatchString(strings.TrimSuffix(line, "\n")) {
					want = append(want, off)
				}
				off += len(line)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%q (fixed %v, icase %v) in %q: lines at %v, want %v", tc.pattern, tc.fixed, tc.icase, text, got, want)
			}
		}
	}
}
