//go:build linux

package bash

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/internal/sandboxinit"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// The execute allowlist: defence in depth under the policy gate. Where
// the kernel has Landlock, a call the gate allowed may execute only the
// programs the gate resolved for it (policy.Decision.Programs), the
// shell, and their ELF interpreters and script interpreters: a program
// the gate did not judge fails with EACCES even if the gate was talked
// around. Landlock forbids mounts in a restricted domain, so it is
// applied inside bubblewrap, after the mounts, by the sandbox's first
// program (internal/sandboxinit: this binary shown under another name),
// which drops root in the same step as setpriv would.

// landlockABI is the Landlock ABI version the kernel offers, 0 for none.
func landlockABI() int {
	v, _, errno := syscall.Syscall(sysLandlockCreateRuleset, 0, 0, landlockRulesetVersion)
	if errno != 0 {
		return 0
	}
	return int(v)
}

const (
	sysLandlockCreateRuleset = 444
	landlockRulesetVersion   = 1 << 0
)

// execList is the allowlist for programs: each program, the interpreter
// it needs (its ELF PT_INTERP, or a script's #! line, recursively), and
// the shell, each a regular file (a symbolic link and its target); a path
// that is missing or not a regular file is left out.
func execList(shell string, programs []string) []string {
	var out []string
	var add func(p string, depth int)
	add = func(p string, depth int) {
		if p == "" || depth > 4 || slices.Contains(out, p) {
			return
		}
		// Only regular files: Landlock's rule on a directory allows all
		// beneath it (a script's "#!/usr" would allow /usr/bin).
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			return
		}
		out = append(out, p)
		if r, err := filepath.EvalSymlinks(p); err == nil && r != p {
			add(r, depth)
		}
		add(interpreters.of(p), depth+1)
		for _, h := range execHelpers[filepath.Base(p)] {
			if lp, err := exec.LookPath(h); err == nil {
				add(lp, depth+1)
			}
		}
	}
	add(shell, 0)
	for _, p := range programs {
		add(p, 0)
	}
	return out
}

// execHelpers are programs a program runs by itself as part of what it
// does: tar's compressors, the sh and gzip of the z* scripts, the sh of
// watch, the echo of xargs without a command.
var execHelpers = map[string][]string{
	"tar": {"gzip", "bzip2", "xz", "zstd", "lzip", "lzma", "lzop"}, "zcat": {"sh", "gzip"}, "zgrep": {"sh", "gzip", "grep"},
	"zless": {"sh", "gzip", "less"}, "gunzip": {"sh", "gzip"}, "zdiff": {"sh", "gzip", "diff"}, "watch": {"sh"}, "xargs": {"echo"},
	"rg": {"gzip", "bzip2", "xz", "lz4", "zstd", "brotli", "uncompress"},
	// git's wrapper is a sh script (git.go); ssh is its transport.
	"git": {"sh", "ssh"},
}

// interpreters caches each program's interpreter by path, while the
// file is the same version (fileCache): a call's allowlist is computed on
// every restricted call, and parsing each program's ELF headers again was
// a measurable part of a fleet's bash call.
var interpreters = interpreterCache{files: fileCache[string]{recent: interpreterRecent, max: maxInterpreters}}

// interpreterRecent is how old a program's last change must be for its
// interpreter to be kept.
const interpreterRecent = 2 * time.Second

// maxInterpreters bounds the programs whose interpreter is kept.
const maxInterpreters = 1024

// interpreterCache keeps interpreterOf of each program by path.
type interpreterCache struct {
	files fileCache[string]
	// read is interpreterOf (nil); tests count the reads through it.
	read func(*os.File) string
}

// of is the interpreter of the program at p, from the cache when the file
// there has not changed; "" when none. The file is opened once: its key
// and its interpreter come from the same open file, so a file swapped in
// at p between the two is never stored under another's key.
func (c *interpreterCache) of(p string) string {
	// O_NONBLOCK: a FIFO swapped in at p must not block the worker.
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	if interp, ok := c.files.get(p, fi); ok {
		return interp
	}
	read := c.read
	if read == nil {
		read = interpreterOf
	}
	interp := read(f)
	c.files.put(p, fi, interp)
	return interp
}

// interpreterOf is the program the kernel runs to execute the file f: its
// ELF interpreter or its #! line's program; "" when none.
func interpreterOf(f *os.File) string {
	head := make([]byte, 256)
	n, _ := f.ReadAt(head, 0)
	head = head[:n]
	if len(head) > 2 && head[0] == '#' && head[1] == '!' {
		line, _, _ := strings.Cut(string(head[2:]), "\n")
		if fields := strings.Fields(line); len(fields) > 0 {
			return fields[0]
		}
		return ""
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return ""
	}
	for _, prog := range ef.Progs {
		// The kernel refuses an interpreter path longer than PATH_MAX;
		// a bigger size must not make this allocate it.
		if prog.Type == elf.PT_INTERP && prog.Filesz <= 4096 {
			b := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(b, 0); err == nil {
				return strings.TrimRight(string(b), "\x00")
			}
		}
	}
	return ""
}

// runners are programs whose work is to run other programs the call
// cannot name in advance (build tools, interpreters, package managers,
// man with its formatters): a call running one is not restricted.
// Allowing them trusts the workspace anyway (POLICY.md). git is not one:
// a call naming it may run git's own helpers (gitExecDir, the wrapper's
// sh, ssh), the program-running settings of its configuration being
// neutralised (git.go).
var runners = map[string]bool{}

func init() {
	for _, r := range strings.Fields(`go make gmake cmake ninja meson npm npx yarn pnpm pnpx bun deno cargo rustc rustup
		python python2 python3 pip pip3 pipx node nodejs perl ruby php java javac mvn gradle man ssh scp sftp rsync
		tclsh lua luajit Rscript dotnet gcc cc g++ c++ clang clang++ ld tox pytest`) {
		runners[r] = true
	}
}

// setupInit turns the execute allowlist on where the sandbox runs and
// the kernel has Landlock, once probes show that the first program works
// here: restricted to cat, it runs cat, which shows the identity and
// capabilities the call would run with (initIdentityOK); false, not on
// the allowlist, is refused. The sandbox's first program is
// toolgate-sandbox-init beside this binary (small, so a call pays about
// what setpriv costs) when it is safely installed (sandboxInitBeside) or,
// without it or if it fails the probes, this binary itself under that
// name (a larger program's start).
func (b *bash) setupInit() {
	if !b.sb.Enabled() {
		return
	}
	abi := landlockABI()
	if abi < 1 {
		b.log.Info("bash: no execute allowlist: the kernel has no Landlock")
		return
	}
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		b.log.Warn("bash: no execute allowlist: cannot find this program", "err", err)
		return
	}
	catPath, err1 := exec.LookPath("cat")
	falsePath, err2 := exec.LookPath("false")
	if err1 != nil || err2 != nil {
		b.log.Warn("bash: no execute allowlist: its probes need cat and false in PATH")
		return
	}
	allow := execList(catPath, nil)
	probe := func(init string, noexec bool, argv []string, stdout io.Writer) int {
		spec := b.initSpec(true, allow)
		if noexec {
			spec.Noexec = noexecDirs("")
		}
		argv = spec.Args(argv)
		id := b.id
		id.init, id.noexec = true, noexec
		mounts := initMounts(init)
		if b.userNS {
			mounts = append(mounts, "--unshare-user") // as the calls get it
		}
		argv = b.sb.argv("", "/", false, id, mounts, argv)
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = []string{"PATH=" + defaultPath}
		cmd.Stdout = stdout
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return ee.ExitCode()
			}
			return -1
		}
		return 0
	}
	candidates := []string{exe}
	if small := sandboxInitBeside(exe, b.log); small != "" {
		candidates = []string{small, exe}
	}
	// Each program is tried with the remount of the writable places
	// noexec first, then without: the kernel refuses the remount where
	// bwrap nests a second user namespace (an unprivileged worker's
	// sandbox with its own /dev), whose capabilities do not reach the
	// mounts.
	for _, init := range candidates {
		for _, noexec := range []bool{true, false} {
			status := &boundedBuffer{max: 64 << 10}
			if code := probe(init, noexec, []string{catPath, "/proc/self/status"}, status); code != 0 {
				b.log.Warn("bash: the execute allowlist's probe failed", "program", init, "noexec", noexec, "exit_code", code)
				continue
			}
			if err := b.initIdentityOK(status.String()); err != nil {
				b.log.Warn("bash: the sandbox's first program left the wrong identity in its probe", "program", init, "err", err)
				continue
			}
			if code := probe(init, noexec, []string{falsePath}, nil); code != 126 {
				b.log.Warn("bash: a program outside the execute allowlist ran in its probe", "program", init, "exit_code", code)
				continue
			}
			b.init, b.noexec = init, noexec
			if !noexec {
				b.log.Warn("bash: the writable places of restricted calls are not noexec here: the dynamic loader can map a file a call wrote")
			}
			b.log.Info("bash: execute allowlist on", "landlock_abi", abi, "program", init, "noexec", noexec)
			return
		}
	}
	b.log.Warn("bash: no execute allowlist: no program passed its probe")
}

// initIdentityOK checks status, a /proc/self/status of a program the
// sandbox's first program ran, against what it must have done: the user
// and group b's commands run as (the workspace's owner, root, or, for a
// worker not root, the worker's own), no supplementary group where it
// drops or keeps root, no capability in any set (the bounding set
// emptied where it drops or keeps root: an unprivileged worker has no
// capability to lose), and no new privileges.
func (b *bash) initIdentityOK(status string) error {
	fields := map[string]string{}
	for _, l := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			fields[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	uid, gid := uint32(os.Geteuid()), uint32(os.Getegid())
	switch {
	case b.id.drop:
		uid, gid = b.id.uid, b.id.gid
	case b.id.root:
		uid, gid = 0, 0
	}
	const noCaps = "0000000000000000"
	want := map[string]string{
		"Uid":        strings.Repeat(strconv.FormatUint(uint64(uid), 10)+" ", 3) + strconv.FormatUint(uint64(uid), 10),
		"Gid":        strings.Repeat(strconv.FormatUint(uint64(gid), 10)+" ", 3) + strconv.FormatUint(uint64(gid), 10),
		"CapInh":     noCaps,
		"CapPrm":     noCaps,
		"CapEff":     noCaps,
		"CapAmb":     noCaps,
		"NoNewPrivs": "1",
	}
	if b.id.drop || b.id.root {
		want["CapBnd"] = noCaps
		want["Groups"] = ""
	}
	for k, v := range want {
		got, ok := fields[k]
		if !ok || got != v {
			return fmt.Errorf("%s is %q, want %q", k, got, v)
		}
	}
	return nil
}

// boundedBuffer keeps what is written to it up to max bytes, then fails
// the write.
type boundedBuffer struct {
	bytes.Buffer
	max int
}

func (w *boundedBuffer) Write(p []byte) (int, error) {
	if w.Len()+len(p) > w.max {
		return 0, errors.New("output too long")
	}
	return w.Buffer.Write(p)
}

// sandboxInitBeside is the path of toolgate-sandbox-init in exe's
// directory (sandboxInitPath overrides it), "" when there is none or it
// is not safely installed: a regular file (not a symbolic link),
// executable, owned by root or by this program's user and writable by
// no one else, in a directory owned by either and writable by no one
// else. Whoever could replace it would choose what every restricted call
// runs first, as root; a file failing these is ignored with a warning,
// and this program's own binary is used instead.
func sandboxInitBeside(exe string, log *slog.Logger) string {
	p := filepath.Join(filepath.Dir(exe), sandboxinit.Name)
	if sandboxInitPath != "" {
		p = sandboxInitPath
	}
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	if err == nil {
		err = safelyOwned(fi, false)
	}
	if err == nil {
		var di fs.FileInfo
		if di, err = os.Stat(filepath.Dir(p)); err == nil {
			err = safelyOwned(di, true)
		}
	}
	if err != nil {
		log.Warn("bash: ignoring "+sandboxinit.Name+", using this program instead", "path", p, "err", err)
		return ""
	}
	return p
}

// safelyOwned says why fi, a file (or a directory when dir), is not one
// that only root or this program's user can change; nil when it is.
func safelyOwned(fi fs.FileInfo, dir bool) error {
	switch {
	case dir && !fi.IsDir():
		return errors.New("its directory is not a directory")
	case !dir && !fi.Mode().IsRegular():
		return fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	case !dir && fi.Mode()&0o111 == 0:
		return errors.New("not executable")
	case fi.Mode()&0o022 != 0:
		if dir {
			return fmt.Errorf("its directory is writable by group or others (%s)", fi.Mode().Perm())
		}
		return fmt.Errorf("writable by group or others (%s)", fi.Mode().Perm())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("no owner known")
	}
	if st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		if dir {
			return fmt.Errorf("its directory is owned by uid %d, neither root nor this program's", st.Uid)
		}
		return fmt.Errorf("owned by uid %d, neither root nor this program's", st.Uid)
	}
	return nil
}

// sandboxInitPath, when set (by tests), is where setupInit looks for
// toolgate-sandbox-init instead of beside this binary.
var sandboxInitPath string

// allowlist says whether a call's execution is restricted, and to what:
// every shell command the gate allowed itself (not a person, not an
// amendment) is, to the programs it resolved (none: the shell alone),
// their interpreters and known helpers, and for git its exec path; a
// command running a runner is not.
func (b *bash) allowlist(c *tools.Call) execRule {
	d := c.Decision
	switch {
	case b.init == "":
		return execRule{why: "unrestricted: this machine cannot restrict execution"}
	case d == nil || !d.Rendered:
		return execRule{why: "unrestricted: no gate judged the command"}
	case c.Approved || d.Action != policy.Allow:
		return execRule{why: "unrestricted: a person approved the command"}
	case d.Amended():
		return execRule{why: "unrestricted: allowed by an amendment"}
	}
	r := execRule{restrict: true, why: "restricted to the programs the gate resolved"}
	for _, p := range d.Programs {
		base := filepath.Base(p)
		if runners[base] || runners[strings.TrimRight(base, "0123456789.-")] {
			return execRule{why: "unrestricted: " + base + " runs programs the gate cannot name"}
		}
		if base == "git" {
			r.git = true
		}
	}
	r.allow = execList(b.shell, d.Programs)
	if r.git {
		r.allow = append(r.allow, gitRealPath)
		if dir := gitExecDir(); dir != "" {
			r.dirs = append(r.dirs, dir)
		}
	}
	if len(d.Programs) == 0 {
		r.why = "restricted to the shell: the command names no program"
	}
	if !b.noexec {
		r.why += "; the places it writes are not noexec here"
	}
	return r
}

// gitExecDir is git's exec path (its helpers, git-*), resolved, when it
// is a directory of git's own (named git-core): a rule on a directory of
// PATH would allow every program there.
var gitExecDir = sync.OnceValue(func() string {
	p, err := exec.LookPath("git")
	if err != nil {
		return ""
	}
	out, err := exec.Command(p, "--exec-path").Output()
	if err != nil {
		return ""
	}
	dir, err := filepath.EvalSymlinks(strings.TrimSpace(string(out)))
	if err != nil || filepath.Base(dir) != "git-core" {
		return ""
	}
	return dir
})
