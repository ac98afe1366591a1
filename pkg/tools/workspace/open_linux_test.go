package workspace

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// Every file opened has the real path the kernel has for it, whether the
// open took openat2's fast path (no link on the way) or the slow one; and
// the fast path is taken exactly when no link is on the way.
func TestRealPathOfEveryOpen(t *testing.T) {
	c := newCorpus(t)
	// The workspace opened through a link to it: its real path differs
	// from the name it was opened by.
	alias := filepath.Join(t.TempDir(), "alias")
	must(t, os.Symlink(c.dir, alias))
	ws, err := Open(alias)
	must(t, err)
	t.Cleanup(func() { ws.Close() })
	for _, tt := range []struct {
		name string
		fast bool
	}{
		{"file.txt", true},
		{"sub/inner.txt", true},
		{"./sub/../file.txt", true},
		{filepath.Join(alias, "file.txt"), true},
		{filepath.Join(c.dir, "sub", "inner.txt"), true},
		{"rel-in", false},
		{"sub/rel-up-in", false},
		{"chain1", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ws.Open(tt.name, allow)
			must(t, err)
			defer f.Close()
			kernel, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
			must(t, err)
			if f.Real != kernel {
				t.Fatalf("Real %q, the kernel says %q", f.Real, kernel)
			}
			loc, err := ws.Resolve(tt.name)
			must(t, err)
			ff, real, fast := openFast(loc.root, loc.Rel, os.O_RDONLY)
			if fast {
				ff.Close()
				if real != kernel {
					t.Fatalf("fast path says %q, the kernel %q", real, kernel)
				}
			}
			if fast != tt.fast && !noOpenat2.Load() {
				t.Fatalf("fast path taken: %v, want %v", fast, tt.fast)
			}
		})
	}
}
