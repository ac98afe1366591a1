package textdiff

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
)

// lines returns "line 0\n" .. "line n-1\n" with the edits applied: a
// value of "" drops the line, any other value replaces it.
func lines(n int, edits map[int]string) string {
	var b strings.Builder
	for i := range n {
		l, ok := edits[i]
		if !ok {
			l = fmt.Sprintf("line %d\n", i)
		}
		b.WriteString(l)
	}
	return b.String()
}

var cases = []struct {
	name, old, new string
}{
	{"one change", lines(10, nil), lines(10, map[int]string{5: "five\n"})},
	{"edits joined into one hunk then a later hunk", lines(60, nil),
		lines(60, map[int]string{3: "changed 3\n", 20: "", 21: "", 40: "line 40\ninserted\n", 45: "changed 45\n"}) + "tail without newline"},
	{"many joined hunks", lines(100, nil),
		lines(100, map[int]string{10: "", 12: "a\nb\nc\n", 15: "x\n", 40: "", 41: "", 43: "y\n", 47: "z\nz\n", 80: "w\n"})},
	{"new file", "", "package main\n\nfunc main() {}\n"},
	{"everything deleted", "x\ny\n", ""},
	{"no newline at end", "a\nb", "a\nc"},
	{"newline added at end", "a\nb", "a\nb\n"},
	{"insertion at top", "b\nc\n", "a\nb\nc\n"},
	{"deletion at end", lines(8, nil), lines(6, nil)},
}

func TestUnifiedMatchesDiffU(t *testing.T) {
	diffBin := testenv.LookPath(t, "diff", "diffutils")
	dir := t.TempDir()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			pa, pb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
			if err := os.WriteFile(pa, []byte(tt.old), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(pb, []byte(tt.new), 0o644); err != nil {
				t.Fatal(err)
			}
			want, err := exec.Command(diffBin, "-u", "--label", "a/f", "--label", "b/f", pa, pb).Output()
			if code := exitCode(err); code != 1 {
				t.Fatalf("diff -u exited %d: %v", code, err)
			}
			got := Unified("a/f", "b/f", tt.old, tt.new, 3)
			if hunkHeaders(got) != hunkHeaders(string(want)) {
				t.Fatalf("hunk headers differ from diff -u:\n--- got\n%s\n--- diff -u\n%s", got, want)
			}
			applied, err := apply(got, tt.old)
			if err != nil || applied != tt.new {
				t.Fatalf("applying the diff: err %v, got %q, want %q\n%s", err, applied, tt.new, got)
			}
		})
	}
	if d := Unified("a", "b", "same\n", "same\n", 3); d != "" {
		t.Fatalf("equal texts gave %q", d)
	}
}

// hunkHeaders returns the "@@" lines of a unified diff: the line ranges
// are what must agree with diff -u; which of two equally short edit
// scripts fills a hunk may differ.
func hunkHeaders(d string) string {
	var out []string
	for _, l := range strings.Split(d, "\n") {
		if strings.HasPrefix(l, "@@") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// FuzzUnified checks that the diff of any two texts turns the first into
// the second.
func FuzzUnified(f *testing.F) {
	for _, tt := range cases {
		f.Add(tt.old, tt.new)
	}
	f.Fuzz(func(t *testing.T, old, new string) {
		d := Unified("a/f", "b/f", old, new, 3)
		if old == new {
			if d != "" {
				t.Fatalf("equal texts gave %q", d)
			}
			return
		}
		got, err := apply(d, old)
		if err != nil || got != new {
			t.Fatalf("applying the diff: err %v, got %q, want %q\n%s", err, got, new, d)
		}
	})
}

var hunkRE = regexp.MustCompile(`^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@$`)

// apply applies a unified diff to old strictly: every hunk's ranges must
// agree with its lines, its old-file start with the lines consumed so far,
// its new-file start with the lines produced so far, and its context and
// removed lines with old.
func apply(d, old string) (string, error) {
	oldLines := splitKeep(old)
	var out []string
	rest := strings.SplitAfter(d, "\n")
	if len(rest) < 2 || !strings.HasPrefix(rest[0], "--- ") || !strings.HasPrefix(rest[1], "+++ ") {
		return "", fmt.Errorf("no file header")
	}
	rest = rest[2:]
	at := 0 // lines of old consumed
	for len(rest) > 0 && rest[0] != "" {
		m := hunkRE.FindStringSubmatch(strings.TrimSuffix(rest[0], "\n"))
		if m == nil {
			return "", fmt.Errorf("bad hunk header %q", rest[0])
		}
		rest = rest[1:]
		num := func(s string, def int) int {
			if s == "" {
				return def
			}
			n, _ := strconv.Atoi(s)
			return n
		}
		fromN, toN := num(m[2], 1), num(m[4], 1)
		from, to := num(m[1], 0), num(m[3], 0)
		if fromN > 0 {
			from-- // an empty range names the line before it
		}
		if toN > 0 {
			to--
		}
		if from < at {
			return "", fmt.Errorf("hunk %q overlaps the one before", m[0])
		}
		out = append(out, oldLines[at:from]...)
		at = from
		if to != len(out) {
			return "", fmt.Errorf("hunk %q: new-file start %d, want %d", m[0], to+1, len(out)+1)
		}
		for fromN > 0 || toN > 0 {
			if len(rest) == 0 || rest[0] == "" {
				return "", fmt.Errorf("hunk %q ends early", m[0])
			}
			l := rest[0]
			rest = rest[1:]
			if len(rest) > 0 && strings.HasPrefix(rest[0], "\\ No newline at end of file") {
				l = strings.TrimSuffix(l, "\n")
				rest = rest[1:]
			}
			kind, text := l[0], l[1:]
			if kind != '+' {
				if at >= len(oldLines) || oldLines[at] != text || fromN == 0 {
					return "", fmt.Errorf("hunk %q: line %q does not match old line %d", m[0], l, at+1)
				}
				at++
				fromN--
			}
			if kind != '-' {
				if toN == 0 {
					return "", fmt.Errorf("hunk %q: more new lines than its range", m[0])
				}
				out = append(out, text)
				toN--
			}
		}
	}
	out = append(out, oldLines[at:]...)
	return strings.Join(out, ""), nil
}

func splitKeep(s string) []string {
	if s == "" {
		return nil
	}
	l := strings.SplitAfter(s, "\n")
	if l[len(l)-1] == "" {
		l = l[:len(l)-1]
	}
	return l
}
