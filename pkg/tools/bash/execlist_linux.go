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

// interpreters caches interpreter by path, while the file is the same
// (device, inode, size, change times): a call's allowlist is computed on
// every restricted call, and parsing each program's ELF headers again was
// a measurable part of a fleet's bash call.
var interpreters interpreterCache

type interpreterCache struct{ m sync.Map } // path -> interpreterEntry

type interpreterEntry struct {
	key    gitFileKey
	interp string
}

// of is interpreter(p), from the cache when p has not changed.
func (c *interpreterCache) of(p string) string {
	fi, err := os.Stat(p)
	if err != nil {
		return ""
	}
	key, ok := fileKey(fi)
	if !ok {
		return interpreter(p)
	}
	if e, hit := c.m.Load(p); hit && e.(interpreterEntry).key == key {
		return e.(interpreterEntry).interp
	}
	interp := interpreter(p)
	c.m.Store(p, interpreterEntry{key: key, interp: interp})
	return interp
}

// interpreter is the program the kernel runs to execute p: its ELF
// interpreter or its #! line's program; "" when none.
func interpreter(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	head := make([]byte, 256)
	n, _ := f.Read(head)
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
	defer ef.Close()
	for _, prog := range ef.Progs {
		if prog.Type == elf.PT_INTERP {
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
