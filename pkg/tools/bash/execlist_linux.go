//go:build linux

package bash

import (
	"context"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
}

// interpreters caches each program's interpreter by path, while the
// file is the same (device, inode, size, change times): a call's
// allowlist is computed on every restricted call, and parsing each
// program's ELF headers again was a measurable part of a fleet's bash
// call.
var interpreters = interpreterCache{recent: interpreterRecent}

// interpreterRecent is how old a program's last change must be for its
// interpreter to be kept: a change in the same tick of the file system's
// clock would leave its times as they were.
const interpreterRecent = 2 * time.Second

// maxInterpreters bounds the programs whose interpreter is kept.
const maxInterpreters = 1024

// interpreterCache keeps interpreterOf of each program by path, with the
// identity and times of the file it was read from.
type interpreterCache struct {
	// recent: an entry whose file changed less than recent before it was
	// read is not kept.
	recent time.Duration
	// read is interpreterOf (nil); tests count the reads through it.
	read func(*os.File) string

	mu sync.Mutex
	m  map[string]interpreterEntry
}

type interpreterEntry struct {
	key    gitFileKey
	interp string
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
	key, ok := fileKey(fi)
	if ok {
		c.mu.Lock()
		e, hit := c.m[p]
		c.mu.Unlock()
		if hit && e.key == key {
			return e.interp
		}
	}
	read := c.read
	if read == nil {
		read = interpreterOf
	}
	interp := read(f)
	if ok && time.Since(time.Unix(0, max(key.mtime, key.ctime))) > c.recent {
		c.mu.Lock()
		if c.m == nil || len(c.m) >= maxInterpreters {
			c.m = map[string]interpreterEntry{}
		}
		c.m[p] = interpreterEntry{key: key, interp: interp}
		c.mu.Unlock()
	}
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
// git with its transports and signers, man with its formatters): a call
// running one is not restricted. Allowing them trusts the workspace
// anyway (POLICY.md).
var runners = map[string]bool{}

func init() {
	for _, r := range strings.Fields(`go make gmake cmake ninja meson npm npx yarn pnpm pnpx bun deno cargo rustc rustup
		python python2 python3 pip pip3 pipx node nodejs perl ruby php java javac mvn gradle man ssh scp sftp rsync git
		tclsh lua luajit Rscript dotnet gcc cc g++ c++ clang clang++ ld tox pytest`) {
		runners[r] = true
	}
}

// setupInit turns the execute allowlist on where the sandbox runs and
// the kernel has Landlock, once a probe shows it works here: an allowed
// program runs, another is refused. The sandbox's first program is
// toolgate-sandbox-init beside this binary (small, so a call pays about
// what setpriv costs) or, without it or if it fails the probe, this binary
// itself under that name (a larger program's start).
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
	truePath, err1 := exec.LookPath("true")
	falsePath, err2 := exec.LookPath("false")
	if err1 != nil || err2 != nil {
		return
	}
	probe := func(init, run string) int {
		argv := b.initSpec(true, execList(truePath, nil)).Args([]string{run})
		id := b.id
		id.init = true
		argv = b.sb.argv("", "/", false, id, initMounts(init), argv)
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = []string{"PATH=" + defaultPath}
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
	if small := sandboxInitBeside(exe); small != "" {
		candidates = []string{small, exe}
	}
	for _, init := range candidates {
		if code := probe(init, truePath); code != 0 {
			b.log.Warn("bash: the execute allowlist's probe failed", "program", init, "exit_code", code)
			continue
		}
		if code := probe(init, falsePath); code != 126 {
			b.log.Warn("bash: a program outside the execute allowlist ran in its probe", "program", init, "exit_code", code)
			continue
		}
		b.init = init
		b.log.Info("bash: execute allowlist on", "landlock_abi", abi, "program", init)
		return
	}
	b.log.Warn("bash: no execute allowlist: no program passed its probe")
}

// sandboxInitBeside is the path of toolgate-sandbox-init in exe's
// directory, "" when there is none (sandboxInitPath overrides it).
func sandboxInitBeside(exe string) string {
	p := filepath.Join(filepath.Dir(exe), sandboxinit.Name)
	if sandboxInitPath != "" {
		p = sandboxInitPath
	}
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return ""
	}
	return p
}

// sandboxInitPath, when set (by tests), is where setupInit looks for
// toolgate-sandbox-init instead of beside this binary.
var sandboxInitPath string

// allowlist says whether a call's execution is restricted, and to what:
// only a shell command the gate allowed itself (not a person, not an
// amendment), whose programs it resolved.
func (b *bash) allowlist(c *tools.Call) (bool, []string) {
	d := c.Decision
	if b.init == "" || c.Approved || d == nil || !d.Rendered || d.Action != policy.Allow || len(d.Programs) == 0 {
		return false, nil
	}
	for _, p := range d.Programs {
		if base := filepath.Base(p); runners[base] || runners[strings.TrimRight(base, "0123456789.-")] {
			return false, nil
		}
	}
	return true, execList(b.shell, d.Programs)
}
