package builtin

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"
)

// TestToolsOnConfinementCorpus runs the tools on the shapes of path that
// must be refused or handled without blocking.
func TestToolsOnConfinementCorpus(t *testing.T) {
	base := t.TempDir()
	ws, out := filepath.Join(base, "ws"), filepath.Join(base, "out")
	os.MkdirAll(ws, 0o755)
	os.MkdirAll(out, 0o755)
	os.WriteFile(filepath.Join(out, "secret"), []byte("SECRET\n"), 0o644)
	e := newEnv(t, Config{Workspace: ws})
	e.write(t, "ok.txt", "fine\n")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("../out/secret", filepath.Join(ws, "rel-out")))
	must(os.Symlink(filepath.Join(out, "secret"), filepath.Join(ws, "abs-out")))
	must(os.Symlink(out, filepath.Join(ws, "dir-out")))
	must(os.Symlink("/dev/zero", filepath.Join(ws, "zero")))
	must(syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644))
	for _, tc := range []struct {
		tool string
		args map[string]any
		code string
	}{
		{"read", map[string]any{"path": "../out/secret"}, "outside_workspace"},
		{"read", map[string]any{"path": filepath.Join(out, "secret")}, "outside_workspace"},
		{"read", map[string]any{"path": "rel-out"}, "outside_workspace"},
		{"read", map[string]any{"path": "abs-out"}, "outside_workspace"},
		{"read", map[string]any{"path": "dir-out/secret"}, "outside_workspace"},
		{"read", map[string]any{"path": "zero"}, "outside_workspace"},
		{"read", map[string]any{"path": "fifo"}, "not_regular"},
		{"edit", map[string]any{"path": "fifo", "old_string": "a", "new_string": "b"}, "not_regular"},
		{"write", map[string]any{"path": "fifo", "content": "x"}, "not_regular"},
		{"write", map[string]any{"path": "dir-out/new", "content": "x"}, "outside_workspace"},
		{"edit", map[string]any{"path": "rel-out", "old_string": "SECRET", "new_string": "x"}, "outside_workspace"},
		{"ls", map[string]any{"path": "dir-out"}, "outside_workspace"},
		{"ls", map[string]any{"path": "~"}, "outside_workspace"},
		{"grep", map[string]any{"pattern": "SECRET", "path": "dir-out"}, "outside_workspace"},
		{"glob", map[string]any{"pattern": "*", "path": "dir-out"}, "outside_workspace"},
	} {
		o := e.toolErr(t, tc.tool, tc.args)
		if o.Metadata["error"] != tc.code || strings.Contains(o.Content, "SECRET") {
			t.Errorf("%s %v: %v %q, want %s", tc.tool, tc.args, o.Metadata, o.Content, tc.code)
		}
	}
	// Walks skip links and the FIFO instead of following or opening them.
	if o := e.ok(t, "grep", map[string]any{"pattern": "SECRET|fine"}); o.Content != "ok.txt\n" {
		t.Fatalf("grep over the corpus: %q", o.Content)
	}
	if o := e.ok(t, "glob", map[string]any{"pattern": "**"}); o.Content != "ok.txt\n" {
		t.Fatalf("glob over the corpus: %q", o.Content)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "secret")); string(b) != "SECRET\n" {
		t.Fatal("the outside file changed")
	}
}

func TestReadOneLineTenMegabytes(t *testing.T) {
	e := newEnv(t, Config{})
	e.write(t, "one-line.txt", strings.Repeat("0123456789", 1_000_000))
	o := e.ok(t, "read", map[string]any{"path": "one-line.txt"})
	if n := utf8.RuneCountInString(o.Content); n > 2100 {
		t.Fatalf("content is %d characters", n)
	}
	if !strings.Contains(o.Content, "... [9998000 characters clipped]") || o.Metadata["total_lines"] != 1 {
		t.Fatalf("metadata %v, content ends %q", o.Metadata, o.Content[len(o.Content)-60:])
	}
	o = e.ok(t, "grep", map[string]any{"pattern": "789012", "output_mode": "content"})
	if len(o.Content) > 2200 || !strings.Contains(o.Content, "characters clipped]") {
		t.Fatalf("grep content is %d bytes", len(o.Content))
	}
}

func TestOddNamesThroughTools(t *testing.T) {
	e := newEnv(t, Config{})
	names := []string{"-rf", "--version", "new\nline.txt", "tab\tname"}
	for _, n := range names {
		e.ok(t, "write", map[string]any{"path": n, "content": "needle\n"})
		o := e.ok(t, "read", map[string]any{"path": n})
		if o.Content != "     1\tneedle\n" {
			t.Fatalf("read %q: %q", n, o.Content)
		}
		e.ok(t, "edit", map[string]any{"path": n, "old_string": "needle", "new_string": "pin"})
	}
	o := e.ok(t, "ls", map[string]any{})
	for _, w := range []string{" -rf\n", " --version\n", `"new\nline.txt"`, `"tab\tname"`} {
		if !strings.Contains(o.Content, w) {
			t.Errorf("ls lacks %q:\n%s", w, o.Content)
		}
	}
	o = e.ok(t, "grep", map[string]any{"pattern": "pin", "output_mode": "count"})
	if got := strings.Count(o.Content, ":1\n"); got != len(names) {
		t.Fatalf("grep counted %d files:\n%s", got, o.Content)
	}
}
