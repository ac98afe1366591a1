package resultcache

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/workspace"
)

// Each fingerprint changes with what its tool reads, and only then.
func TestFingerprints(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tool   string
		args   map[string]any
		change func(t *testing.T, ws string) // nil: nothing changes
	}{
		{"read unchanged", "read", map[string]any{"path": "a.txt"}, nil},
		{"read same size, mtime kept", "read", map[string]any{"path": "a.txt"}, func(t *testing.T, ws string) {
			p := filepath.Join(ws, "a.txt")
			fi, _ := os.Stat(p)
			must(t, os.WriteFile(p, []byte("ALPHA\n"), 0o644))
			must(t, os.Chtimes(p, fi.ModTime(), fi.ModTime()))
		}},
		{"read replaced by rename", "read", map[string]any{"path": "a.txt"}, func(t *testing.T, ws string) {
			must(t, os.WriteFile(filepath.Join(ws, "n.tmp"), []byte("alpha\n"), 0o644))
			must(t, os.Rename(filepath.Join(ws, "n.tmp"), filepath.Join(ws, "a.txt")))
		}},
		{"read of another file changed", "read", map[string]any{"path": "a.txt"}, func(t *testing.T, ws string) {
			must(t, os.WriteFile(filepath.Join(ws, "d", "b.txt"), []byte("elsewhere\n"), 0o644))
		}},
		{"ls unchanged", "ls", map[string]any{}, nil},
		{"ls new empty dir", "ls", map[string]any{}, func(t *testing.T, ws string) { must(t, os.Mkdir(filepath.Join(ws, "d2"), 0o755)) }},
		{"ls chmod", "ls", map[string]any{}, func(t *testing.T, ws string) { must(t, os.Chmod(filepath.Join(ws, "a.txt"), 0o600)) }},
		{"ls symlink retargeted", "ls", map[string]any{}, func(t *testing.T, ws string) {
			must(t, os.Remove(filepath.Join(ws, "link")))
			must(t, os.Symlink("d/b.txt", filepath.Join(ws, "link")))
		}},
		{"grep unchanged", "grep", map[string]any{"pattern": "x"}, nil},
		{"grep file in a subdir rewritten", "grep", map[string]any{"pattern": "x"}, func(t *testing.T, ws string) {
			p := filepath.Join(ws, "d", "b.txt")
			fi, _ := os.Stat(p)
			must(t, os.WriteFile(p, []byte("BETA\n"), 0o644))
			must(t, os.Chtimes(p, fi.ModTime(), fi.ModTime()))
		}},
		{"grep hidden file added", "grep", map[string]any{"pattern": "x"}, func(t *testing.T, ws string) {
			must(t, os.WriteFile(filepath.Join(ws, ".hidden"), []byte("x\n"), 0o644))
		}},
		{"grep file removed", "grep", map[string]any{"pattern": "x"}, func(t *testing.T, ws string) { must(t, os.Remove(filepath.Join(ws, "d", "b.txt"))) }},
		{"glob below path unchanged by a change elsewhere", "glob", map[string]any{"pattern": "*.txt", "path": "d"}, func(t *testing.T, ws string) {
			must(t, os.WriteFile(filepath.Join(ws, "a.txt"), []byte("elsewhere\n"), 0o644))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			must(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("alpha\n"), 0o644))
			must(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
			must(t, os.WriteFile(filepath.Join(dir, "d", "b.txt"), []byte("beta\n"), 0o644))
			must(t, os.Symlink("a.txt", filepath.Join(dir, "link")))
			old := time.Now().Add(-time.Hour)
			for _, p := range []string{"a.txt", "d/b.txt"} {
				must(t, os.Chtimes(filepath.Join(dir, p), old, old))
			}
			ws, err := workspace.Open(dir)
			must(t, err)
			defer ws.Close()
			c := &tools.Call{Args: tc.args}
			fp := fingerprinters[tc.tool]
			before, err := fp(context.Background(), ws, c)
			must(t, err)
			wantSame := tc.change == nil || strings.HasSuffix(tc.name, "elsewhere") || tc.name == "read of another file changed"
			if tc.change != nil {
				tc.change(t, dir)
			}
			after, err := fp(context.Background(), ws, c)
			must(t, err)
			if (before == after) != wantSame {
				t.Errorf("fingerprint same=%v, want same=%v", before == after, wantSame)
			}
		})
	}
}

// Calls whose reads a fingerprint cannot cover are not cached.
func TestUncacheable(t *testing.T) {
	dir := t.TempDir()
	ws, err := workspace.Open(dir)
	must(t, err)
	defer ws.Close()
	for _, args := range []map[string]any{
		{"pattern": "/etc/*"}, {"pattern": "../*"}, {"pattern": "a/../../b"},
	} {
		if _, err := globPrint(context.Background(), ws, &tools.Call{Args: args}); !errors.Is(err, errUncacheable) {
			t.Errorf("glob %v: %v, want not cacheable", args, err)
		}
	}
	if _, err := readPrint(context.Background(), ws, &tools.Call{Args: map[string]any{}}); !errors.Is(err, errUncacheable) {
		t.Errorf("read without a path: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A change of what the path rules let a call read changes the print of a
// search, though no file changed.
func TestTreePrintFollowsThePathRules(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("x\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("x\n"), 0o644))
	ws, err := workspace.Open(dir)
	must(t, err)
	defer ws.Close()
	refuse := ""
	c := &tools.Call{Args: map[string]any{"pattern": "x"}, CheckPath: func(real string) error {
		if refuse != "" && strings.HasSuffix(real, refuse) {
			return errors.New("denied")
		}
		return nil
	}}
	open, err := treePrint(context.Background(), ws, c)
	must(t, err)
	refuse = "secret.txt"
	closed, err := treePrint(context.Background(), ws, c)
	must(t, err)
	if open == closed {
		t.Error("the print did not change with the path rules")
	}
}
