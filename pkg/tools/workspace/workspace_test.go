package workspace

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
)

// corpus is a workspace with an outside directory holding a secret, and
// links of every shape between them.
type corpus struct {
	ws               *Workspace
	dir, out, secret string
}

func newCorpus(t *testing.T) *corpus {
	t.Helper()
	base := t.TempDir()
	c := &corpus{dir: filepath.Join(base, "ws"), out: filepath.Join(base, "outside")}
	for _, d := range []string{c.dir, c.out, filepath.Join(c.dir, "sub"), filepath.Join(c.out, "dir")} {
		must(t, os.MkdirAll(d, 0o755))
	}
	c.secret = filepath.Join(c.out, "secret.txt")
	must(t, os.WriteFile(c.secret, []byte("SECRET"), 0o644))
	must(t, os.WriteFile(filepath.Join(c.out, "dir", "f"), []byte("SECRET"), 0o644))
	must(t, os.WriteFile(filepath.Join(c.dir, "file.txt"), []byte("inside"), 0o644))
	must(t, os.WriteFile(filepath.Join(c.dir, "sub", "inner.txt"), []byte("inner"), 0o644))
	links := map[string]string{
		"rel-in":         "file.txt",
		"sub/rel-up-in":  "../file.txt",
		"chain1":         "chain2",
		"chain2":         "sub/chain3",
		"sub/chain3":     "../file.txt",
		"rel-out":        "../outside/secret.txt",
		"abs-out":        c.secret,
		"abs-in":         filepath.Join(c.dir, "file.txt"),
		"chain-out1":     "chain-out2",
		"chain-out2":     "../outside/secret.txt",
		"dir-out":        c.out,
		"dir-out-rel":    "../outside",
		"dev-null":       "/dev/null",
		"loop1":          "loop2",
		"loop2":          "loop1",
		"dangling":       "nowhere",
		"sub/deep-out":   "../../outside/dir/f",
		"proc-self-root": "/proc/self/root/etc/passwd",
	}
	for name, target := range links {
		must(t, os.Symlink(target, filepath.Join(c.dir, name)))
	}
	must(t, syscall.Mkfifo(filepath.Join(c.dir, "fifo"), 0o644))
	ws, err := Open(c.dir)
	must(t, err)
	t.Cleanup(func() { ws.Close() })
	c.ws = ws
	return c
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func allow(string) error { return nil }

func TestOpenConfinement(t *testing.T) {
	c := newCorpus(t)
	t.Setenv("HOME", c.out)
	for _, tc := range []struct {
		name string
		want error  // nil: opens
		body string // content when it opens
	}{
		{"file.txt", nil, "inside"},
		{"./sub/../file.txt", nil, "inside"},
		{filepath.Join(c.dir, "file.txt"), nil, "inside"},
		{filepath.Join(c.dir, "sub", "..", "file.txt"), nil, "inside"},
		{"rel-in", nil, "inside"},
		{"sub/rel-up-in", nil, "inside"},
		{"chain1", nil, "inside"},
		{"../outside/secret.txt", ErrOutside, ""},
		{"sub/../../outside/secret.txt", ErrOutside, ""},
		{"..", ErrOutside, ""},
		{c.secret, ErrOutside, ""},
		{"/etc/passwd", ErrOutside, ""},
		{"/", ErrOutside, ""},
		{"~", ErrOutside, ""},
		{"~/secret.txt", ErrOutside, ""},
		{"~root/.bashrc", fs.ErrNotExist, ""}, // an ordinary name in the workspace
		{"", ErrInvalidPath, ""},
		{"file.txt\x00.png", ErrInvalidPath, ""},
		{"rel-out", ErrOutside, ""},
		{"abs-out", ErrOutside, ""},
		{"abs-in", ErrOutside, ""}, // os.Root refuses absolute links, even inward
		{"chain-out1", ErrOutside, ""},
		{"dir-out/secret.txt", ErrOutside, ""},
		{"dir-out-rel/secret.txt", ErrOutside, ""},
		{"sub/deep-out", ErrOutside, ""},
		{"dev-null", ErrOutside, ""},
		{"proc-self-root", ErrOutside, ""},
		{"fifo", ErrNotRegular, ""},
		{"sub", ErrIsDir, ""},
		{".", ErrIsDir, ""},
		{"missing.txt", fs.ErrNotExist, ""},
		{"dangling", fs.ErrNotExist, ""},
		{"loop1", syscall.ELOOP, ""},
	} {
		t.Run(strconv.Quote(tc.name), func(t *testing.T) {
			f, err := c.ws.Open(tc.name, allow)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				defer f.Close()
				b, _ := io.ReadAll(f)
				if string(b) != tc.body {
					t.Fatalf("read %q, want %q", b, tc.body)
				}
				if f.Real != filepath.Join(c.dir, "file.txt") {
					t.Fatalf("real path %s", f.Real)
				}
				return
			}
			if err == nil {
				b, _ := io.ReadAll(f)
				f.Close()
				t.Fatalf("opened, read %q; want %v", b, tc.want)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			var pe *fs.PathError
			if !errors.As(err, &pe) || pe.Path != tc.name {
				t.Fatalf("err %v does not carry the path %q", err, tc.name)
			}
		})
	}
}

func TestOpenRefusesSocketAndDevice(t *testing.T) {
	c := newCorpus(t)
	l, err := net.Listen("unix", filepath.Join(c.dir, "sock"))
	must(t, err)
	defer l.Close()
	names := []string{"sock"}
	if err := syscall.Mknod(filepath.Join(c.dir, "null"), syscall.S_IFCHR|0o666, 1<<8|3); err == nil {
		names = append(names, "null")
	} else {
		t.Logf("mknod: %v (not root?): device node case skipped", err)
	}
	for _, n := range names {
		_, err := c.ws.Open(n, nil)
		if !errors.Is(err, ErrNotRegular) {
			t.Errorf("%s: %v, want ErrNotRegular", n, err)
		}
		if _, err := c.ws.WriteFile(n, []byte("x"), 0o644, nil); !errors.Is(err, ErrNotRegular) {
			t.Errorf("write %s: %v, want ErrNotRegular", n, err)
		}
	}
}

func TestOpenHardLinks(t *testing.T) {
	c := newCorpus(t)
	hl := filepath.Join(c.dir, "hard")
	if err := os.Link(c.secret, hl); err != nil {
		t.Fatalf("hard link in the test directory: %v", err)
	}
	// With a path policy in force the other names cannot be judged: refuse.
	if _, err := c.ws.Open("hard", allow); !errors.Is(err, ErrHardLink) {
		t.Fatalf("with a checker: %v, want ErrHardLink", err)
	}
	// Without one there is no policy to get around.
	f, err := c.ws.Open("hard", nil)
	if err != nil {
		t.Fatalf("without a checker: %v", err)
	}
	if f.Links() != 2 {
		t.Fatalf("links %d", f.Links())
	}
	f.Close()
	// Writing replaces the link with a new file and leaves the other name
	// untouched.
	if _, err := c.ws.WriteFile("hard", []byte("new"), 0o644, allow); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(c.secret); string(b) != "SECRET" {
		t.Fatalf("outside name changed to %q", b)
	}
}

func TestCheckerJudgesRealPath(t *testing.T) {
	c := newCorpus(t)
	denied := errors.New("denied")
	var seen []string
	check := func(real string) error {
		seen = append(seen, real)
		if strings.HasSuffix(real, "file.txt") {
			return denied
		}
		return nil
	}
	_, err := c.ws.Open("chain1", check)
	if !errors.Is(err, denied) {
		t.Fatalf("err %v, want the checker's error", err)
	}
	if len(seen) != 1 || seen[0] != filepath.Join(c.dir, "file.txt") {
		t.Fatalf("checker saw %v, want the real path of the target", seen)
	}
	if _, err := c.ws.WriteFile("sub/x/file.txt", []byte("x"), 0o644, check); !errors.Is(err, denied) {
		t.Fatalf("write: %v", err)
	}
	if _, err := os.Stat(filepath.Join(c.dir, "sub/x/file.txt")); !os.IsNotExist(err) {
		t.Fatalf("denied write created the file: %v", err)
	}
}

func TestWriteFileConfinement(t *testing.T) {
	c := newCorpus(t)
	for _, name := range []string{"../outside/new.txt", "dir-out/new.txt", "dir-out-rel/new.txt", "abs-out", "rel-out", filepath.Join(c.out, "new.txt")} {
		if _, err := c.ws.WriteFile(name, []byte("pwned"), 0o644, nil); !errors.Is(err, ErrOutside) {
			t.Errorf("write %s: %v, want ErrOutside", name, err)
		}
	}
	if b, _ := os.ReadFile(c.secret); string(b) != "SECRET" {
		t.Fatalf("secret changed to %q", b)
	}
	if _, err := os.Stat(filepath.Join(c.out, "new.txt")); !os.IsNotExist(err) {
		t.Fatalf("a file was created outside: %v", err)
	}
	res, err := c.ws.WriteFile("a/b/c.txt", []byte("abc"), 0o640, nil)
	if err != nil || !res.Created || res.Bytes != 3 || res.Real != filepath.Join(c.dir, "a/b/c.txt") {
		t.Fatalf("write new: %+v %v", res, err)
	}
	if fi, _ := os.Stat(res.Real); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v", fi.Mode())
	}
	// A FIFO is refused without blocking (no reader is ever attached).
	if _, err := c.ws.WriteFile("fifo", []byte("x"), 0o644, nil); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("write fifo: %v", err)
	}
}

func TestReadFileRefusesLargeSparseFileUnread(t *testing.T) {
	c := newCorpus(t)
	p := filepath.Join(c.dir, "sparse")
	f, err := os.Create(p)
	must(t, err)
	must(t, f.Truncate(1<<30))
	f.Close()
	before := readBytes(t)
	_, _, err = c.ws.ReadFile("sparse", 10<<20, nil)
	read := readBytes(t) - before
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Size != 1<<30 || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err %v, want TooLargeError with the size", err)
	}
	if read > 1<<20 {
		t.Fatalf("the process read %d bytes while refusing the file", read)
	}
}

// readBytes is the bytes this process has read through read(2) so far.
func readBytes(t testing.TB) int64 {
	const missing = "the kernel counts no bytes read per process (/proc/self/io, CONFIG_TASK_IO_ACCOUNTING, which Debian's kernels have): "
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		testenv.Missing(t, missing+err.Error())
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "rchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("/proc/self/io: rchar %q: %v", v, err)
			}
			return n
		}
	}
	testenv.Missing(t, missing+"no rchar line")
	return 0
}

// TestSwappedDirectoryNeverEscapes swaps a directory for a symlink to the
// outside while reads of a file beneath it run, and counts escapes.
func TestSwappedDirectoryNeverEscapes(t *testing.T) {
	c := newCorpus(t)
	d := filepath.Join(c.dir, "swap")
	must(t, os.Mkdir(d, 0o755))
	must(t, os.WriteFile(filepath.Join(d, "f"), []byte("inside"), 0o644))
	const tries = 5000
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			os.Rename(d, d+".real")
			os.Symlink(filepath.Join(c.out, "dir"), d)
			os.Remove(d)
			os.Symlink("../outside/dir", d)
			os.Remove(d)
			os.Rename(d+".real", d)
		}
	}()
	var escapes, inside, refused, outside int
	// At least tries reads, more (up to a bound) until both states were met.
	n := 0
	for ; n < tries || ((inside == 0 || outside == 0) && n < 50*tries); n++ {
		f, err := c.ws.Open("swap/f", nil)
		if err != nil {
			refused++
			if errors.Is(err, ErrOutside) {
				outside++
			}
			continue
		}
		b, _ := io.ReadAll(f)
		f.Close()
		if bytes.Contains(b, []byte("SECRET")) {
			escapes++
		} else {
			inside++
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d tries: %d read inside, %d refused (%d as outside), %d escapes", n, inside, refused, outside, escapes)
	if escapes != 0 {
		t.Fatalf("%d of %d reads escaped the workspace", escapes, n)
	}
	if inside == 0 || outside == 0 {
		t.Fatalf("the reads never met both states (%d inside, %d outside): the test exercised nothing", inside, outside)
	}
}

func TestExtraRoots(t *testing.T) {
	c := newCorpus(t)
	ws, err := Open(c.dir, c.out)
	must(t, err)
	defer ws.Close()
	f, err := ws.Open(c.secret, nil)
	if err != nil {
		t.Fatalf("absolute path in an extra root: %v", err)
	}
	f.Close()
	if f.Loc.Root != c.out || f.Loc.Rel != "secret.txt" {
		t.Fatalf("location %+v", f.Loc)
	}
	// Relative paths still resolve in the workspace only.
	if _, err := ws.Open("../outside/secret.txt", nil); !errors.Is(err, ErrOutside) {
		t.Fatalf("relative climb: %v", err)
	}
	// A symlink from one root into another is refused: each root confines
	// its own links.
	if _, err := ws.Open("rel-out", nil); !errors.Is(err, ErrOutside) {
		t.Fatalf("link across roots: %v", err)
	}
	if got := ws.Roots(); len(got) != 2 || got[0] != c.dir || got[1] != c.out {
		t.Fatalf("roots %v", got)
	}
}

func TestOpenValidatesRoots(t *testing.T) {
	if _, err := Open(""); !errors.Is(err, ErrInvalidPath) {
		t.Fatalf("empty: %v", err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
}

func TestOddNames(t *testing.T) {
	c := newCorpus(t)
	for _, name := range []string{"-rf", "--help", "new\nline.txt", " space ", "tab\tname", "ünï©ødé"} {
		if _, err := c.ws.WriteFile(name, []byte(name), 0o644, nil); err != nil {
			t.Fatalf("write %q: %v", name, err)
		}
		f, err := c.ws.Open(name, nil)
		if err != nil {
			t.Fatalf("open %q: %v", name, err)
		}
		b, _ := io.ReadAll(f)
		f.Close()
		if string(b) != name {
			t.Fatalf("%q read %q", name, b)
		}
	}
}

func TestWalkNeverOpensSpecialFiles(t *testing.T) {
	c := newCorpus(t)
	l, err := net.Listen("unix", filepath.Join(c.dir, "sub", "sock"))
	must(t, err)
	defer l.Close()
	must(t, syscall.Mkfifo(filepath.Join(c.dir, "sub", "fifo2"), 0o644))
	must(t, os.WriteFile(filepath.Join(c.dir, ".hidden"), []byte("h"), 0o644))
	var got []string
	_, err = c.ws.Walk(context.Background(), ".", WalkOptions{}, nil, func(e *Entry) error {
		f, _, err := e.Open()
		if err != nil {
			return err
		}
		f.Close()
		got = append(got, e.Rel)
		return nil
	})
	must(t, err)
	want := "file.txt sub/inner.txt"
	if strings.Join(got, " ") != want {
		t.Fatalf("walk yielded %v, want %s (no links, FIFOs, sockets or hidden files)", got, want)
	}
}

func TestWalkCancelled(t *testing.T) {
	c := newCorpus(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.ws.Walk(ctx, ".", WalkOptions{}, nil, func(*Entry) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
}

func TestQuoteName(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"main.go", "main.go"},
		{"dir/a b.txt", "dir/a b.txt"},
		{"ünïcödé/日本.txt", "ünïcödé/日本.txt"},
		{`back\slash`, `back\slash`},
		{"a\nb", `"a\nb"`},
		{"a\rb", `"a\rb"`},
		{"a\tb", `"a\tb"`},
		{"\x1b[31mred", `"\x1b[31mred"`},
		{"a\u202eb", `"a\u202eb"`},
		{"zero\u200bwidth", `"zero\u200bwidth"`},
		{"del\x7f", `"del\x7f"`},
		{"bad\xffutf8", `"bad\xffutf8"`},
		{`"starts with a quote`, `"\"starts with a quote"`},
		{" lead", `" lead"`},
		{"trail ", `"trail "`},
		{"", `""`},
	} {
		got := QuoteName(tt.in)
		if got != tt.want {
			t.Errorf("QuoteName(%q) = %s, want %s", tt.in, got, tt.want)
		}
		if strings.HasPrefix(got, `"`) {
			if back, err := strconv.Unquote(got); err != nil || back != tt.in {
				t.Errorf("Unquote(%s) = %q, %v; want %q", got, back, err, tt.in)
			}
		}
	}
}

// TestWriteKeepsOwnerAndMode: a root worker replacing a file keeps its
// owner, group and mode, and a new file gets its directory's owner.
func TestWriteKeepsOwnerAndMode(t *testing.T) {
	if !testenv.AsRoot(t) { // only root can give files to other users
		return
	}
	dir := t.TempDir()
	if err := os.Chown(dir, 4242, 4343); err != nil {
		t.Fatal(err)
	}
	w, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	p := filepath.Join(dir, "kept.sh")
	if err := os.WriteFile(p, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 4242, 4343); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o751); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kept.sh", "new.txt", "sub/new.txt"} {
		if _, err := w.WriteFile(name, []byte("new"), 0o644, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name     string
		uid, gid uint32
		mode     fs.FileMode
	}{
		{"kept.sh", 4242, 4343, 0o751},
		{"new.txt", 4242, 4343, 0o644},
		{"sub", 4242, 4343, 0o755},
		{"sub/new.txt", 4242, 4343, 0o644},
	} {
		fi, err := os.Stat(filepath.Join(dir, tt.name))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != tt.uid || st.Gid != tt.gid || fi.Mode().Perm() != tt.mode {
			t.Errorf("%s: owner %d:%d mode %v, want %d:%d %v", tt.name, st.Uid, st.Gid, fi.Mode().Perm(), tt.uid, tt.gid, tt.mode)
		}
	}
}

// FuzzQuoteName: whatever the name, the printed form is one line of
// printable characters, and either the name itself or its Go quoting.
func FuzzQuoteName(f *testing.F) {
	for _, s := range []string{"main.go", "a\nb", "\x1b[31m", "\u202e", "\"x", " ", "\xff", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got := QuoteName(name)
		if got != name {
			back, err := strconv.Unquote(got)
			if err != nil || back != name {
				t.Fatalf("QuoteName(%q) = %s, which does not unquote to the name (%q, %v)", name, got, back, err)
			}
		}
		for _, r := range got {
			if !strconv.IsPrint(r) {
				t.Fatalf("QuoteName(%q) = %q holds the unprintable %U", name, got, r)
			}
		}
	})
}
