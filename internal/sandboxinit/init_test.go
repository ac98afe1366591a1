//go:build linux

package sandboxinit

import (
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		want    command
		wantErr string
	}{
		{args: []string{"--", "true"}, want: command{argv: []string{"true"}}},
		{args: []string{"--user=1000:1001", "--", "/bin/sh", "-c", "x"},
			want: command{drop: true, uid: 1000, gid: 1001, argv: []string{"/bin/sh", "-c", "x"}}},
		{args: []string{"--root", "--restrict-exec", "--allow=/usr/bin/ls", "--allow=/bin", "--", "ls", "--"},
			want: command{root: true, restrict: true, allow: []string{"/usr/bin/ls", "/bin"}, argv: []string{"ls", "--"}}},
		{args: []string{"--restrict-exec", "--", "ls"}, want: command{restrict: true, argv: []string{"ls"}}},
		{args: []string{"--restrict-exec", "--allow-dir=/usr/lib/git-core", "--noexec=/tmp", "--noexec=/ws", "--keep-exec=/tmp/x", "--seccomp=5", "--", "ls"},
			want: command{restrict: true, allowDirs: []string{"/usr/lib/git-core"}, noexec: []string{"/tmp", "/ws"}, keepExec: []string{"/tmp/x"}, seccomp: 5, argv: []string{"ls"}}},
		{args: []string{"--seccomp=2", "--", "ls"}, wantErr: "want --seccomp=FD"},
		{args: []string{"--seccomp=x", "--", "ls"}, wantErr: "want --seccomp=FD"},
		{args: []string{"--user=1000", "--", "ls"}, wantErr: "want --user=UID:GID"},
		{args: []string{"--user=-1:0", "--", "ls"}, wantErr: "want --user=UID:GID"},
		{args: []string{"--user=4294967296:0", "--", "ls"}, wantErr: "want --user=UID:GID"},
		{args: []string{"--user=1:1", "--root", "--", "ls"}, wantErr: "together"},
		{args: []string{"--bogus", "--", "ls"}, wantErr: `unknown argument "--bogus"`},
		{args: []string{"--root"}, wantErr: "usage"},
		{args: []string{"--root", "--"}, wantErr: "no command"},
		{args: nil, wantErr: "usage"},
	} {
		got, err := parse(tt.args)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parse(%q): error %v, want one containing %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parse(%q) = %+v, %v; want %+v", tt.args, got, err, tt.want)
		}
	}
}

// TestCmdline: the command line is read whole when the program runs under
// its name, and refused, not cut, when it cannot be: a read error, or more
// than the limit. Under another name only its first argument matters.
func TestCmdline(t *testing.T) {
	long := strings.Repeat("x", 10000)
	for _, tt := range []struct {
		name    string
		data    string
		limit   int
		want    []string
		wantErr string
	}{
		{"the name", "/tmp/.toolgate-init/" + Name + "\x00--root\x00--\x00true\x00", 1 << 20, []string{"/tmp/.toolgate-init/" + Name, "--root", "--", "true"}, ""},
		{"the bare name", Name + "\x00--\x00" + long + "\x00", 1 << 20, []string{Name, "--", long}, ""},
		{"another name", "/usr/bin/toolgate\x00worker\x00", 1 << 20, nil, ""},
		{"another long name", long + "\x00" + long + "\x00", 1 << 20, nil, ""},
		{"a first argument over the limit", long + "\x00", 5000, nil, "longer than 5000 bytes"},
		{"a name ending like it", "/bin/x" + Name + "\x00--\x00true\x00", 1 << 20, nil, ""},
		{"over the limit", Name + "\x00--\x00" + long + "\x00", 5000, nil, "longer than 5000 bytes"},
		{"empty", "", 1 << 20, nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			go func() {
				_, _ = w.WriteString(tt.data)
				w.Close()
			}()
			got, err := readCmdline(int(r.Fd()), tt.limit)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || got != nil {
					t.Fatalf("readCmdline = %q, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("readCmdline = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	t.Run("read error", func(t *testing.T) {
		d, err := os.Open(t.TempDir()) // read(2) of a directory fails with EISDIR
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if got, err := readCmdline(int(d.Fd()), 1<<20); err == nil || got != nil {
			t.Fatalf("readCmdline of a directory = %q, %v; want an error", got, err)
		}
	})
}

// TestErrorsKeepTheErrno: an error of the init says what failed and keeps
// the call's errno for errors.Is.
func TestErrorsKeepTheErrno(t *testing.T) {
	err := wrap("switch user", syscall.EPERM)
	if !errors.Is(err, syscall.EPERM) || err.Error() != "switch user: "+syscall.EPERM.Error() {
		t.Fatalf("wrap: %v (Is EPERM: %v)", err, errors.Is(err, syscall.EPERM))
	}
	if wrap("x", nil) != nil {
		t.Fatal("wrap of nil is not nil")
	}
	if err := newError("usage"); err.Error() != "usage" || errors.Unwrap(err) != nil {
		t.Fatalf("newError: %v", err)
	}
}

// FuzzArgs: whatever a Spec holds, its command line parses back to it, and
// no command line makes parse panic.
func FuzzArgs(f *testing.F) {
	f.Add(true, uint32(1000), uint32(1000), false, true, "/usr/bin/ls", "--", "ls")
	f.Add(false, uint32(0), uint32(0), true, false, "", "-c", "")
	f.Fuzz(func(t *testing.T, drop bool, uid, gid uint32, root, restrict bool, allow, cmd, arg string) {
		uid, gid = uid&0x7fffffff, gid&0x7fffffff
		if drop && root {
			root = false
		}
		s := Spec{Drop: drop, UID: uid, GID: gid, Root: root, Restrict: restrict}
		if restrict && allow != "" {
			s.Allow = []string{allow}
		}
		args := s.Args([]string{cmd, arg})
		if args[0] != Path {
			t.Fatalf("Args starts with %q", args[0])
		}
		got, err := parse(args[1:])
		if err != nil {
			t.Fatalf("parse(Args(%+v)): %v", s, err)
		}
		want := command{drop: drop, root: root, restrict: restrict, allow: s.Allow, argv: []string{cmd, arg}}
		if drop {
			want.uid, want.gid = int(uid), int(gid)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("parse(Args(%+v)) = %+v, want %+v", s, got, want)
		}
		_, _ = parse([]string{allow, cmd, arg})
	})
}

// status is the lines of /proc/self/status that say who a process is
// and what it may do, as the program printed them.
func status(t *testing.T, out []byte) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(l, ":")
		switch k {
		case "Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs":
			if ok {
				m[k] = strings.Join(strings.Fields(v), " ")
			}
		}
	}
	if len(m) != 9 {
		t.Fatalf("status lines missing:\n%s", out)
	}
	return m
}

// TestDropsLikeSetpriv: run as root, the program leaves the command in
// the state setpriv --clear-groups --no-new-privs --bounding-set=-all
// --inh-caps=-all leaves it, switched to a user or kept root, and with
// no capability at all (the kernel's own account, /proc/self/status).
func TestDropsLikeSetpriv(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("dropping root needs root")
	}
	setpriv := testenv.LookPath(t, "setpriv", "util-linux")
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Fatal(err)
	}
	init := asInit(t)
	run := func(name string, argv ...string) map[string]string {
		out, err := exec.Command(name, argv...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", name, argv, err, out)
		}
		return status(t, out)
	}
	for _, tt := range []struct {
		name            string
		init, setpriv   []string
		uid, zeroCapBnd string
	}{
		{"user", []string{"--user=65534:65533"}, []string{"--reuid=65534", "--regid=65533"}, "65534 65534 65534 65534", "0000000000000000"},
		{"root", []string{"--root"}, nil, "0 0 0 0", "0000000000000000"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := run(init, append(tt.init, "--", cat, "/proc/self/status")...)
			want := run(setpriv, append(tt.setpriv, "--clear-groups", "--no-new-privs", "--bounding-set=-all", "--inh-caps=-all", "--", cat, "/proc/self/status")...)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("after %s:\n%v\nafter setpriv:\n%v", Name, got, want)
			}
			if got["Uid"] != tt.uid || got["CapBnd"] != tt.zeroCapBnd || got["CapEff"] != "0000000000000000" || got["Groups"] != "" || got["NoNewPrivs"] != "1" {
				t.Errorf("after %s: %v", Name, got)
			}
		})
	}
}

// TestRestrictExec: restricted to cat (and its loader), the program runs
// cat; with an allowlist naming nothing, or only directories (cat's own,
// the root), the command itself is refused: it exits 126 with the
// reason, and cat never runs.
func TestRestrictExec(t *testing.T) {
	if _, _, errno := syscall.Syscall(444, 0, 0, 1); errno != 0 { // landlock_create_ruleset: the ABI version
		testenv.Missing(t, "the kernel has no Landlock: execution cannot be restricted")
	}
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Fatal(err)
	}
	cat, _ = filepath.EvalSymlinks(cat)
	ef, err := elf.Open(cat)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	var interp string // cat's dynamic loader, which the kernel executes too
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			interp, _ = filepath.EvalSymlinks(strings.TrimRight(string(b), "\x00"))
		}
	}
	init := asInit(t)
	marker := filepath.Join(t.TempDir(), "marker")
	if err := os.WriteFile(marker, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(init, "--restrict-exec", "--allow="+cat, "--allow="+interp, "--", cat, marker).CombinedOutput()
	if err != nil || string(out) != "hello" {
		t.Fatalf("restricted to cat, cat: %v %q", err, out)
	}
	for _, tt := range []struct {
		name  string
		allow []string
	}{
		{"nothing", nil},
		// A directory allows nothing, not all beneath it.
		{"cat's directory", []string{filepath.Dir(cat), interp}},
		{"the root", []string{"/", interp}},
	} {
		argv := []string{"--restrict-exec"}
		for _, a := range tt.allow {
			argv = append(argv, "--allow="+a)
		}
		out, err = exec.Command(init, append(argv, "--", cat, marker)...).CombinedOutput()
		var ee *exec.ExitError
		if err == nil || !errors.As(err, &ee) || ee.ExitCode() != 126 || !strings.Contains(string(out), "permission denied") {
			t.Fatalf("restricted to %s, cat: %v %q; want exit 126 and permission denied", tt.name, err, out)
		}
	}
}

// asInit is this test binary under the program's name: its init (this
// package's) does the work.
func asInit(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	init := filepath.Join(t.TempDir(), Name)
	if err := os.Symlink(self, init); err != nil {
		t.Fatal(err)
	}
	return init
}

func TestUnescapeMount(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"/tmp", "/tmp"},
		{`/ws/a\040b`, "/ws/a b"},
		{`/ws/tab\011x\134y`, "/ws/tab\tx\\y"},
		{`/ws/end\04`, `/ws/end\04`},
	} {
		if got := unescapeMount(tt.in); got != tt.want {
			t.Errorf("unescapeMount(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestMountFlags(t *testing.T) {
	const stRelatime = 4096
	for _, tt := range []struct {
		st   int64
		want uintptr
	}{
		{0, 0},
		{syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV, syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV},
		{stRelatime | syscall.MS_NOSUID, syscall.MS_RELATIME | syscall.MS_NOSUID},
		{syscall.MS_NOATIME | 1<<30, syscall.MS_NOATIME},
	} {
		if got := mountFlags(tt.st); got != tt.want {
			t.Errorf("mountFlags(%#x) = %#x, want %#x", tt.st, got, tt.want)
		}
	}
}
