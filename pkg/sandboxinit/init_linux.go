//go:build linux

package sandboxinit

import (
	"errors"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"
)

func init() {
	args, err := cmdline()
	if err != nil {
		fail(err)
	}
	if args == nil || isVersion(args) {
		return // not the sandbox's first program, or asked its version: main answers
	}
	fail(run(args[1:]))
}

// fail reports err and exits as a shell does for a command it cannot run:
// the command never runs.
func fail(err error) {
	_, _ = syscall.Write(2, []byte("toolgate: sandbox init: "+err.Error()+"\n"))
	syscall.Exit(126)
}

// maxCmdline bounds the command line read: more than the kernel lets
// execve pass (at most 3/4 of 8 MiB for arguments and environment).
const maxCmdline = 8 << 20

// cmdline is this process's command line when it runs under [Name], nil
// when it does not. It is read from /proc rather than os.Args: importing
// os would make this package wait for the packages Go initialises before
// os's dependants, which is most of a worker's start. Only the first
// argument is read until it is known to be the name, so a program that
// links this package but runs under another name reads one block of its
// command line. Without /proc it is nil (then this is not the sandbox's
// first program: the sandbox always has one). A command line that cannot
// be read whole (a read error, or more than maxCmdline) is an error: a
// partial one is never run.
func cmdline() ([]string, error) {
	fd, err := syscall.Open("/proc/self/cmdline", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil
	}
	defer syscall.Close(fd)
	return readCmdline(fd, maxCmdline)
}

// readCmdline is cmdline read from fd, at most limit bytes.
func readCmdline(fd, limit int) ([]string, error) {
	var data []byte
	buf := make([]byte, 4096)
	named := false // the first argument is whole in data and is Name
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, wrap("read /proc/self/cmdline", err)
		}
		if n == 0 {
			break
		}
		data = append(data, buf[:n]...)
		if len(data) > limit {
			return nil, newError("command line longer than " + strconv.Itoa(limit) + " bytes")
		}
		if !named {
			end := index(string(data), "\x00")
			if end < 0 {
				continue
			}
			if !isName(string(data[:end])) {
				return nil, nil
			}
			named = true
		}
	}
	if !named && !isName(string(data)) {
		return nil, nil
	}
	if len(data) > 0 && data[len(data)-1] == 0 {
		data = data[:len(data)-1]
	}
	return split(string(data), "\x00"), nil
}

// initError is an error of the init: what it was doing and, when a call
// failed, the call's error (an errno), which errors.Is sees through
// Unwrap. It stands in for fmt.Errorf, which this package does not
// import (see cmdline).
type initError struct {
	msg string
	err error
}

func (e *initError) Error() string {
	if e.err == nil {
		return e.msg
	}
	return e.msg + ": " + e.err.Error()
}

func (e *initError) Unwrap() error { return e.err }

func newError(msg string) error { return &initError{msg: msg} }

// wrap is err with what failed, msg; nil when err is.
func wrap(msg string, err error) error {
	if err == nil {
		return nil
	}
	return &initError{msg: msg, err: err}
}

// isVersion reports whether args ask the program's version and nothing
// else (toolgate-sandbox-init --version): main prints it, with the build
// information this package does not import the means to read.
func isVersion(args []string) bool { return len(args) == 2 && args[1] == "--version" }

// isName reports whether arg0 runs this program under [Name].
func isName(arg0 string) bool { return arg0 == Name || hasSuffix(arg0, "/"+Name) }

// Linux's numbers (the same on every architecture for Landlock; prctl's
// and capset's from <linux/prctl.h> and <linux/capability.h>).
const (
	sysLandlockCreateRuleset = 444
	sysLandlockAddRule       = 445
	sysLandlockRestrictSelf  = 446
	landlockAccessExecute    = 1 << 0
	landlockRulePathBeneath  = 1
	prCapbsetDrop            = 24
	prSetNoNewPrivs          = 38
	prCapAmbient             = 47
	prCapAmbientClearAll     = 4
	capVersion3              = 0x20080522
	oPath                    = 0x200000
)

// command is a parsed command line.
type command struct {
	drop      bool
	root      bool
	uid, gid  int
	restrict  bool
	allow     []string
	allowDirs []string
	noexec    []string
	keepExec  []string
	seccomp   int
	chdir     string
	home      string
	argv      []string
}

func parse(args []string) (command, error) {
	var c command
	for i, a := range args {
		switch {
		case a == "--":
			c.argv = args[i+1:]
			if len(c.argv) == 0 {
				return c, newError("no command after --")
			}
			if c.drop && c.root {
				return c, newError(flagUser + " and " + flagRoot + " together")
			}
			return c, nil
		case hasPrefix(a, flagUser):
			u, g, ok := cut(trimPrefix(a, flagUser), ":")
			uid, err1 := strconv.ParseUint(u, 10, 31)
			gid, err2 := strconv.ParseUint(g, 10, 31)
			if !ok || err1 != nil || err2 != nil {
				return c, newError("bad " + a + ": want --user=UID:GID")
			}
			c.drop, c.uid, c.gid = true, int(uid), int(gid)
		case a == flagRoot:
			c.root = true
		case a == flagRestrict:
			c.restrict = true
		case hasPrefix(a, flagAllow):
			c.allow = append(c.allow, trimPrefix(a, flagAllow))
		case hasPrefix(a, flagAllowDir):
			c.allowDirs = append(c.allowDirs, trimPrefix(a, flagAllowDir))
		case hasPrefix(a, flagNoexec):
			c.noexec = append(c.noexec, trimPrefix(a, flagNoexec))
		case hasPrefix(a, flagKeepExec):
			c.keepExec = append(c.keepExec, trimPrefix(a, flagKeepExec))
		case hasPrefix(a, flagChdir):
			c.chdir = trimPrefix(a, flagChdir)
		case hasPrefix(a, flagHome):
			c.home = trimPrefix(a, flagHome)
			if !hasPrefix(c.home, "/") {
				return c, newError("bad " + a + ": want an absolute directory")
			}
		case hasPrefix(a, flagSeccomp):
			fd, err := strconv.ParseUint(trimPrefix(a, flagSeccomp), 10, 31)
			if err != nil || fd < 3 {
				return c, newError("bad " + a + ": want --seccomp=FD, FD 3 or more")
			}
			c.seccomp = int(fd)
		default:
			return c, newError("unknown argument " + strconv.Quote(a))
		}
	}
	return c, newError("usage: " + Name + " [--user=UID:GID | --root] [--restrict-exec [--allow=PATH]... [--allow-dir=DIR]...] [--noexec=DIR]... [--keep-exec=PATH]... [--seccomp=FD] [--chdir=DIR] [--home=DIR] -- COMMAND [ARG ...] | --wait=FD")
}

// run does what the command line says and execs the command; it returns
// only on failure, and the command never runs then.
func run(args []string) error {
	if len(args) > 0 && hasPrefix(args[0], flagTemplate) {
		return serveTemplate(args)
	}
	if len(args) == 1 && hasPrefix(args[0], flagWait) {
		var err error
		if args, err = waitArgs(trimPrefix(args[0], flagWait)); err != nil || args == nil {
			return err
		}
	}
	c, err := parse(args)
	if err != nil {
		return err
	}
	if c.chdir != "" {
		if err := syscall.Chdir(c.chdir); err != nil {
			return wrap("chdir "+c.chdir, err)
		}
	}
	prog, err := lookPath(c.argv[0])
	if err != nil {
		return err
	}
	// Capabilities, no_new_privs and the Landlock domain belong to a
	// thread, and the exec below runs on this one.
	runtime.LockOSThread()
	if err := prctl(prSetNoNewPrivs, 1); err != nil {
		return wrap("no_new_privs", err)
	}
	if len(c.noexec) > 0 {
		if err := remountNoexec(c.noexec, c.keepExec); err != nil {
			return err
		}
	}
	if c.drop || c.root || len(c.noexec) > 0 {
		if err := dropPrivileges(c); err != nil {
			return err
		}
	}
	if c.home != "" {
		if err := syscall.Mkdir(c.home, 0o700); err != nil {
			return wrap("make the home "+c.home, err)
		}
	}
	if c.restrict {
		if err := restrictExec(c.allow, c.allowDirs); err != nil {
			return err
		}
	}
	if c.seccomp > 0 {
		if err := loadSeccomp(c.seccomp); err != nil {
			return err
		}
	}
	return wrap("exec "+prog, syscall.Exec(prog, c.argv, syscall.Environ()))
}

// waitArgs reads a prepared sandbox's command line (WaitArgs; fds is
// "FD:READY") after it says it waits: NUL-terminated arguments to end of
// file. Nothing read (the sandbox was discarded) exits without running
// anything.
func waitArgs(fds string) ([]string, error) {
	a, r, _ := cut(fds, ":")
	fd, err1 := strconv.ParseUint(a, 10, 31)
	ready, err2 := strconv.ParseUint(r, 10, 31)
	if err1 != nil || err2 != nil || fd < 3 || ready < 3 {
		return nil, newError("bad " + flagWait + fds + ": want FD:READY, both 3 or more")
	}
	for {
		_, err := syscall.Write(int(ready), []byte{1})
		if err != syscall.EINTR {
			if err != nil {
				return nil, wrap("say the sandbox waits", err)
			}
			break
		}
	}
	syscall.Close(int(ready))
	data, err := readFD(int(fd), maxCmdline)
	syscall.Close(int(fd))
	if err != nil {
		return nil, wrap("read the command line", err)
	}
	if data == "" {
		syscall.Exit(0)
	}
	if data[len(data)-1] != 0 {
		return nil, newError("the command line read is cut short")
	}
	return split(data[:len(data)-1], "\x00"), nil
}

// dropPrivileges leaves c's user (or root) without capabilities or
// supplementary groups, as setpriv --clear-groups --bounding-set=-all
// --inh-caps=-all does.
func dropPrivileges(c command) error {
	if err := dropBounding(); err != nil {
		return err
	}
	if !c.drop && !c.root {
		// An unprivileged worker's user: it has no groups to clear
		// (its user namespace forbids setgroups), only the capabilities
		// the remount needed.
		return clearCaps()
	}
	if err := syscall.Setgroups(nil); err != nil {
		return wrap("clear the supplementary groups", err)
	}
	if c.drop {
		if err := syscall.Setresgid(c.gid, c.gid, c.gid); err != nil {
			return wrap("switch group", err)
		}
		if err := syscall.Setresuid(c.uid, c.uid, c.uid); err != nil {
			return wrap("switch user", err)
		}
	}
	return clearCaps()
}

// dropBounding empties the capability bounding set and the ambient set
// of this thread. The bounding set goes first: emptying it needs
// CAP_SETPCAP, which the switch of user drops.
func dropBounding() error {
	for capNum := uintptr(0); capNum < 64; capNum++ {
		if err := prctl(prCapbsetDrop, capNum); err != nil {
			if errors.Is(err, syscall.EINVAL) {
				break // past the kernel's last capability
			}
			return wrap("empty the capability bounding set", err)
		}
	}
	if err := prctl(prCapAmbient, prCapAmbientClearAll); err != nil && !errors.Is(err, syscall.EINVAL) {
		return wrap("clear the ambient capabilities", err)
	}
	return nil
}

// clearCaps empties the effective, permitted and inheritable sets (a
// switch of user has emptied the first two already).
func clearCaps() error {
	hdr := struct {
		version uint32
		pid     int32
	}{capVersion3, 0}
	var data [2]struct{ effective, permitted, inheritable uint32 }
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); errno != 0 {
		return wrap("clear the capabilities", errno)
	}
	return nil
}

// restrictExec lets this thread, and what it execs, execute only the
// regular files at the paths allow and what lies beneath the directories
// dirs. A path of allow missing here or that is not a regular file (a
// directory, whose rule would allow all beneath it) is skipped, as is a
// path of dirs that is not a directory: that only narrows what may run.
func restrictExec(allow, dirs []string) error {
	attr := struct{ handled uint64 }{landlockAccessExecute}
	fd, _, errno := syscall.RawSyscall(sysLandlockCreateRuleset, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if errno != 0 {
		return wrap("landlock_create_ruleset", errno)
	}
	for _, p := range allow {
		// A rule on a directory would allow all beneath it: only the
		// regular file opened (a symbolic link's target) is allowed.
		if err := addRule(fd, p, syscall.S_IFREG); err != nil {
			return err
		}
	}
	for _, p := range dirs {
		if err := addRule(fd, p, syscall.S_IFDIR); err != nil {
			return err
		}
	}
	if _, _, errno := syscall.RawSyscall(sysLandlockRestrictSelf, fd, 0, 0); errno != 0 {
		return wrap("landlock_restrict_self", errno)
	}
	syscall.Close(int(fd))
	return nil
}

// addRule allows executing beneath p, when it is of the file type typ.
func addRule(ruleset uintptr, p string, typ uint32) error {
	f, err := syscall.Open(p, oPath|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil // not on this machine: nothing to allow
	}
	defer syscall.Close(f)
	var st syscall.Stat_t
	if err := syscall.Fstat(f, &st); err != nil || st.Mode&syscall.S_IFMT != typ {
		return nil
	}
	rule := struct {
		access uint64
		fd     int32
	}{landlockAccessExecute, int32(f)}
	if _, _, errno := syscall.RawSyscall6(sysLandlockAddRule, ruleset, landlockRulePathBeneath, uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
		return wrap("landlock_add_rule "+p, errno)
	}
	return nil
}

// remountNoexec remounts every mount point at or under one of dirs, but
// those keep names, with noexec added to the flags it has (statfs), so
// that the remount changes nothing else and keeps the flags a user
// namespace locks. The mount table is read once from /proc/self/mountinfo;
// a mount point it lists twice (one mount over another) is remounted once,
// which reaches the one on top, the one paths resolve to.
func remountNoexec(dirs, keep []string) error {
	table, err := readFile("/proc/self/mountinfo", maxCmdline)
	if err != nil {
		return err
	}
	done := map[string]bool{}
	for _, line := range split(table, "\n") {
		f := split(line, " ")
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if done[mp] || contains(keep, mp) || !underAny(mp, dirs) {
			continue
		}
		done[mp] = true
		var st syscall.Statfs_t
		if err := syscall.Statfs(mp, &st); err != nil {
			return wrap("statfs "+mp, err)
		}
		flags := uintptr(syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_NOEXEC) | mountFlags(int64(st.Flags))
		if err := syscall.Mount("", mp, "", flags, ""); err != nil {
			return wrap("remount "+mp+" noexec", err)
		}
	}
	return nil
}

// mountFlags are the mount flags of statfs's f_flags (ST_*), as
// MS_REMOUNT must repeat them.
func mountFlags(st int64) uintptr {
	const stRelatime = 4096
	var ms uintptr
	for _, f := range []uintptr{syscall.MS_RDONLY, syscall.MS_NOSUID, syscall.MS_NODEV, syscall.MS_NOEXEC,
		syscall.MS_SYNCHRONOUS, syscall.MS_MANDLOCK, syscall.MS_NOATIME, syscall.MS_NODIRATIME} {
		if uintptr(st)&f != 0 {
			ms |= f // the same bit in both
		}
	}
	if st&stRelatime != 0 {
		ms |= syscall.MS_RELATIME
	}
	return ms
}

// loadSeccomp loads the seccomp filter read from fd (a BPF program of
// 8-byte instructions) on this thread, and closes fd.
func loadSeccomp(fd int) error {
	prog, err := readFD(fd, 1<<16)
	syscall.Close(fd)
	if err != nil {
		return wrap("read the seccomp filter", err)
	}
	if len(prog) == 0 || len(prog)%8 != 0 {
		return newError("the seccomp filter is not a BPF program")
	}
	return loadFilter(prog)
}

// readFile is the content of the file p, at most limit bytes.
func readFile(p string, limit int) (string, error) {
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", wrap("open "+p, err)
	}
	defer syscall.Close(fd)
	s, err := readFD(fd, limit)
	return s, wrap("read "+p, err)
}

// readFD reads fd to its end, at most limit bytes.
func readFD(fd, limit int) (string, error) {
	var data []byte
	buf := make([]byte, 4096)
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return "", err
		}
		if n == 0 {
			return string(data), nil
		}
		data = append(data, buf[:n]...)
		if len(data) > limit {
			return "", newError("longer than " + strconv.Itoa(limit) + " bytes")
		}
	}
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if index(s, "\\") < 0 {
		return s
	}
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] >= '0' && s[i+1] <= '3' {
			b = append(b, (s[i+1]-'0')<<6|(s[i+2]-'0')<<3|(s[i+3]-'0'))
			i += 3
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

// underAny reports whether p is one of dirs or lies under one.
func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if p == d || hasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func prctl(option, arg uintptr) error {
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, option, arg, 0, 0, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// lookPath finds name in the environment's PATH unless it has a slash.
func lookPath(name string) (string, error) {
	if index(name, "/") >= 0 {
		return name, nil
	}
	path, _ := syscall.Getenv("PATH")
	for _, dir := range split(path, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + name
		var st syscall.Stat_t
		if syscall.Stat(p, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG && st.Mode&0o111 != 0 {
			return p, nil
		}
	}
	return "", newError(strconv.Quote(name) + ": not found in PATH")
}

// The few string functions this needs, so that it does not import
// strings, which waits for unicode's initialisation (see cmdline).

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

func hasSuffix(s, p string) bool { return len(s) >= len(p) && s[len(s)-len(p):] == p }

func trimPrefix(s, p string) string {
	if hasPrefix(s, p) {
		return s[len(p):]
	}
	return s
}

func index(s, sep string) int {
	for i := 0; i+len(sep) <= len(s); i++ {
		if s[i:i+len(sep)] == sep {
			return i
		}
	}
	return -1
}

func cut(s, sep string) (before, after string, found bool) {
	if i := index(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

func split(s, sep string) []string {
	var out []string
	for {
		before, after, found := cut(s, sep)
		out = append(out, before)
		if !found {
			return out
		}
		s = after
	}
}
