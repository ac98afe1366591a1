//go:build linux

package bash

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"unsafe"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// The execute allowlist: defence in depth under the policy gate. Where
// the kernel has Landlock, a call the gate allowed may execute only the
// programs the gate resolved for it (policy.Decision.Programs), the
// shell, their ELF interpreters and script interpreters, and git's own
// programs: a program the gate did not judge fails with EACCES even if
// the gate was talked around. Landlock forbids mounts in a restricted
// domain, so it is applied inside bubblewrap, after the mounts, by this
// very binary run again under the name execListName (see init).

// execListName is the name this binary is shown under inside the sandbox;
// run under it, it applies the allowlist given before "--" and execs what
// follows.
const execListName = "toolgate-exec-allowlist"

// execListPath is where the sandbox shows this binary.
const execListPath = "/tmp/.toolgate-exec/" + execListName

// Landlock's system calls and constants (the same numbers on every
// architecture).
const (
	sysLandlockCreateRuleset = 444
	sysLandlockAddRule       = 445
	sysLandlockRestrictSelf  = 446
	landlockRulesetVersion   = 1 << 0
	landlockAccessExecute    = 1 << 0
	landlockRulePathBeneath  = 1
	prSetNoNewPrivs          = 38
	oPath                    = 0x200000 // O_PATH
)

func init() {
	if filepath.Base(os.Args[0]) != execListName {
		return
	}
	err := execAllowed(os.Args[1:])
	fmt.Fprintf(os.Stderr, "toolgate: execute allowlist: %v\n", err)
	os.Exit(126)
}

// landlockABI is the Landlock ABI version the kernel offers, 0 for none.
func landlockABI() int {
	v, _, errno := syscall.Syscall(sysLandlockCreateRuleset, 0, 0, landlockRulesetVersion)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// execAllowed restricts execution to the paths before "--" in args and
// execs the command after it; it returns only on failure.
func execAllowed(args []string) error {
	i := slices.Index(args, "--")
	if i < 0 || i+1 >= len(args) {
		return fmt.Errorf("usage: %s PATH... -- COMMAND", execListName)
	}
	allowed, argv := args[:i], args[i+1:]
	// The restriction is the thread's; the exec below runs on it.
	runtime.LockOSThread()
	attr := struct{ handled uint64 }{landlockAccessExecute}
	fd, _, errno := syscall.Syscall(sysLandlockCreateRuleset, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if errno != 0 {
		return fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	for _, p := range allowed {
		f, err := syscall.Open(p, oPath|syscall.O_CLOEXEC, 0)
		if err != nil {
			continue // not on this machine: nothing to allow
		}
		rule := struct {
			access uint64
			fd     int32
		}{landlockAccessExecute, int32(f)}
		_, _, errno := syscall.Syscall6(sysLandlockAddRule, fd, landlockRulePathBeneath, uintptr(unsafe.Pointer(&rule)), 0, 0, 0)
		syscall.Close(f)
		if errno != 0 {
			return fmt.Errorf("landlock_add_rule %s: %w", p, errno)
		}
	}
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0, 0, 0, 0); errno != 0 {
		return fmt.Errorf("no_new_privs: %w", errno)
	}
	if _, _, errno := syscall.Syscall(sysLandlockRestrictSelf, fd, 0, 0); errno != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	return syscall.Exec(argv[0], argv, os.Environ())
}

// execList is the allowlist for programs: each program, the interpreter
// it needs (its ELF PT_INTERP, or a script's #! line, recursively), and
// the shell.
func execList(shell string, programs []string) []string {
	var out []string
	var add func(p string, depth int)
	add = func(p string, depth int) {
		if p == "" || depth > 4 || slices.Contains(out, p) {
			return
		}
		out = append(out, p)
		if r, err := filepath.EvalSymlinks(p); err == nil && r != p {
			add(r, depth)
		}
		add(interpreter(p), depth+1)
		for _, h := range execHelpers[filepath.Base(p)] {
			if lp, err := exec.LookPath(h); err == nil {
				add(lp, depth+1)
			}
		}
		if filepath.Base(p) == "git" {
			// git runs its own programs from its exec path, and the
			// sandbox's git is a script of sh running the real one.
			add(gitRealPath, depth+1)
			add(gitExecDir(), depth+1)
			add("/bin/sh", depth+1)
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

// gitExecDir is the directory git runs its subcommands from.
func gitExecDir() string {
	_, inExec := gitBinaries()
	if inExec == "" {
		return ""
	}
	return filepath.Dir(inExec)
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

// setupExecList turns the execute allowlist on where the sandbox runs and
// the kernel has Landlock, once a probe shows it works here: an allowed
// program runs, another is refused.
func (b *bash) setupExecList() {
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
	probe := func(run string) int {
		argv := append(append([]string{execListPath}, execList(truePath, nil)...), "--", run)
		argv = b.sb.argv("", "/", false, b.id, execListMounts(exe), argv)
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
	if code := probe(truePath); code != 0 {
		b.log.Warn("bash: no execute allowlist: the probe failed", "exit_code", code)
		return
	}
	if code := probe(falsePath); code != 126 {
		b.log.Warn("bash: no execute allowlist: a program outside it ran in the probe", "exit_code", code)
		return
	}
	b.execList = exe
	b.log.Info("bash: execute allowlist on", "landlock_abi", abi)
}

// allowlist returns the mounts and the command line that restrict what a
// call executes to what the gate resolved for it: only for a shell
// command the gate allowed itself (not a person, not an amendment),
// whose programs it resolved.
func (b *bash) allowlist(c *tools.Call, argv []string) ([]string, []string) {
	d := c.Decision
	if b.execList == "" || c.Approved || d == nil || !d.Rendered || d.Action != policy.Allow || len(d.Programs) == 0 {
		return nil, argv
	}
	for _, p := range d.Programs {
		if base := filepath.Base(p); runners[base] || runners[strings.TrimRight(base, "0123456789.-")] {
			return nil, argv
		}
	}
	list := execList(b.shell, d.Programs)
	out := append(append(append([]string{execListPath}, list...), "--"), argv...)
	return execListMounts(b.execList), out
}

// execListMounts show exe at execListPath, in a directory the user
// commands run as can enter.
func execListMounts(exe string) []string {
	return []string{"--perms", "0755", "--dir", filepath.Dir(execListPath), "--ro-bind", exe, execListPath}
}
