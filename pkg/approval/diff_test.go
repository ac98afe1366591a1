package approval

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestUnifiedDiff(t *testing.T) {
	tests := []struct {
		name, old, new string
	}{
		{"one line changed", "a\nb\nc\nd\ne\nf\ng\nh\n", "a\nb\nc\nd\nE\nf\ng\nh\n"},
		{"new file", "", "package main\n\nfunc main() {}\n"},
		{"deleted text", "x\ny\n", ""},
		{"two hunks", strings.Repeat("l\n", 3) + "old1\n" + strings.Repeat("m\n", 10) + "old2\n" + strings.Repeat("n\n", 3),
			strings.Repeat("l\n", 3) + "new1\n" + strings.Repeat("m\n", 10) + "new2\n" + strings.Repeat("n\n", 3)},
		{"no newline at end", "a\nb", "a\nc"},
		{"insertion at top", "b\nc\n", "a\nb\nc\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := UnifiedDiff("f.txt", tt.old, tt.new)
			golden(t, filepath.Join("testdata", "diff", strings.ReplaceAll(tt.name, " ", "_")+".diff"), got)
		})
	}
	if d := UnifiedDiff("f", "same\n", "same\n"); d != "" {
		t.Fatalf("equal texts gave %q", d)
	}
}

func TestUnifiedDiffLargeIsBounded(t *testing.T) {
	var a, b strings.Builder
	for i := 0; i < 5000; i++ {
		a.WriteString("a" + strings.Repeat("x", i%7) + "\n")
		b.WriteString("b" + strings.Repeat("y", i%5) + "\n")
	}
	d := UnifiedDiff("big", a.String(), b.String())
	if got := strings.Count(d, "\n-"); got != 5000 {
		t.Fatalf("large diff removed %d lines, want 5000", got)
	}
}

func TestArgsDiff(t *testing.T) {
	d := ArgsDiff("edit", map[string]any{"path": "a.go", "old_string": "x := 1\n", "new_string": "x := 2\n"})
	if !strings.Contains(d, "-x := 1\n+x := 2\n") || !strings.Contains(d, "--- a/a.go") {
		t.Fatalf("edit diff = %q", d)
	}
	if d := ArgsDiff("bash", map[string]any{"command": "ls"}); d != "" {
		t.Fatalf("bash diff = %q", d)
	}
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("%s differs:\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}
