//go:build linux

package sandboxinit

import (
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"unsafe"
)

// A sandbox template (Template) is a first program that serves many
// calls, each in a sandbox of its own forked from the template's, without
// bwrap or the start of a program per call. Per call, on a thread of its
// own that is never given back to the runtime (runtime.LockOSThread
// without unlocking: the runtime ends the thread with its goroutine, and
// never clones another from it), the template:
//
//   - copies its mount namespace for the thread (unshare CLONE_NEWNS,
//     which unshares CLONE_FS too), mounts fresh tmpfs instances on /tmp
//     and /dev/shm (a superblock per call) and a devpts instance on
//     /dev/pts, and moves back under /tmp and /dev/shm clones of the
//     template's mounts there (the workspace, git's real binary), makes
//     /dev read-only;
//   - covers /proc with an empty read-only directory, moves the thread
//     into the call's cgroups (the tasks files the worker opened and
//     passed), so that what it forks starts there, and unshares the
//     PID, IPC, UTS, cgroup and (without network) network namespaces
//     for the thread's children;
//   - enters the call's directory, drops privileges on the thread alone
//     (raw setresuid and the like: syscall.Setresuid would change every
//     thread), makes the home and loads the seccomp filter (per thread,
//     no TSYNC);
//   - forks the call's init (callInit: PID 1 of the new PID namespace),
//     then, from a fresh thread that enters the call's mount namespace,
//     mounts a procfs instance of that namespace on /proc (the "pidns"
//     mount option, which needs the namespace to have its PID 1) with
//     the read-only covers the template's /proc has;
//   - restricts execution (Landlock, per thread), forks the command
//     (syscall.ForkExec: clone with CLONE_VM|CLONE_VFORK, which the
//     filter allows), which inherits all of it, moves the thread back to
//     the template's cgroups, sets the call's resource limits on the
//     command and opens its gate (GatePrologue), says the command
//     started, waits for it, ends the init (the kernel then kills
//     whatever the call left) and says how the command ended.
//
// The template's own mount, PID and network namespaces, identity and
// capabilities are never changed by a call.

// template is a serving template's state.
type template struct {
	ctl     int
	filter  string // the seccomp program
	home    []int  // the template's own cgroups' tasks files
	network bool
	noexec  bool     // /tmp and /dev/shm are mounted noexec
	keep    []string // top mount points under /tmp and /dev/shm, moved into each call's
	covers  []string // read-only mount points under /proc
	limits  []Rlimit // each call's
	wg      sync.WaitGroup
}

// Linux's numbers for the mount API and close_range (the same on every
// architecture).
const (
	sysOpenTree         = 428
	sysMoveMount        = 429
	sysCloseRange       = 436
	openTreeClone       = 1
	atRecursive         = 0x8000
	moveMountFEmptyPath = 0x4
	closeRangeCloexec   = 1 << 2
	cloneNewCgroup      = 0x02000000
)

// serveTemplate is the template's program; it never returns.
func serveTemplate(args []string) error {
	spec, err := parseTemplate(args)
	if err != nil {
		return err
	}
	t := &template{ctl: spec.Ctl, home: spec.Home, network: spec.Network, limits: spec.Limits}
	ready, calls, noexec, keepExec := spec.Ready, spec.Calls, spec.Noexec, spec.KeepExec
	prog, err := readFD(spec.Seccomp, 1<<16)
	syscall.Close(spec.Seccomp)
	if err != nil || len(prog) == 0 || len(prog)%8 != 0 {
		return newError("the seccomp filter is not a BPF program")
	}
	t.filter = prog
	// No descriptor the template holds reaches a command: the commands
	// get their standard streams and nothing else.
	if _, _, errno := syscall.RawSyscall(sysCloseRange, 3, ^uintptr(0), closeRangeCloexec); errno != 0 {
		return wrap("close_range", errno)
	}
	// The runtime's template thread, which makes the threads started
	// from locked ones, is made now, from a thread no call changed.
	runtime.LockOSThread()
	runtime.UnlockOSThread()
	if len(noexec) > 0 {
		if err := remountNoexec(noexec, keepExec); err != nil {
			return err
		}
		t.noexec = true
	}
	if err := t.survey(); err != nil {
		return err
	}
	if err := t.probe(); err != nil {
		return wrap("the template cannot make a call's sandbox", err)
	}
	for {
		_, err := syscall.Write(ready, []byte{1})
		if err != syscall.EINTR {
			if err != nil {
				return wrap("say the template waits", err)
			}
			break
		}
	}
	syscall.Close(ready)
	t.serve(calls)
	t.wg.Wait()
	syscall.Exit(0)
	return nil
}

// survey reads the template's mount table: the mounts under /tmp and
// /dev/shm that each call gets back over its fresh ones (the topmost
// only; a clone brings those beneath), and the read-only covers of
// /proc. A shared mount (one whose mounts would propagate to the
// template's, or from a call's to another's) is refused.
func (t *template) survey() error {
	var st syscall.Stat_t
	if err := syscall.Stat(callInit, &st); err != nil {
		return wrap("a call's init "+callInit, err)
	}
	table, err := readFile("/proc/self/mountinfo", maxCmdline)
	if err != nil {
		return err
	}
	var points []string
	for _, line := range split(table, "\n") {
		f := split(line, " ")
		if len(f) < 7 {
			continue
		}
		for _, opt := range f[6:] {
			if opt == "-" {
				break
			}
			if hasPrefix(opt, "shared:") {
				return newError("the mount " + f[4] + " is shared: a call's mounts would propagate")
			}
		}
		points = append(points, unescapeMount(f[4]))
	}
	for _, mp := range points {
		switch {
		case hasPrefix(mp, "/proc/"):
			if !contains(t.covers, mp) {
				t.covers = append(t.covers, mp)
			}
		case hasPrefix(mp, "/tmp/") || hasPrefix(mp, "/dev/shm/"):
			if mp == Dir || hasPrefix(mp, Dir+"/") || contains(t.keep, mp) {
				continue
			}
			t.keep = append(t.keep, mp)
		}
	}
	// The topmost only.
	var top []string
	for _, mp := range t.keep {
		under := false
		for _, o := range t.keep {
			if o != mp && hasPrefix(mp, o+"/") {
				under = true
			}
		}
		if !under {
			top = append(top, mp)
		}
	}
	t.keep = top
	return nil
}

// probe makes a call's namespaces and mounts once, with cat (from PATH)
// as the call's PID 1 until its procfs is mounted, on threads of their
// own that then end, so that a template that cannot never says it is
// ready.
func (t *template) probe() error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		errc <- t.probeHere()
	}()
	return <-errc
}

func (t *template) probeHere() error {
	mntNS, nsDir, err := t.isolate(nil)
	if err != nil {
		return err
	}
	defer syscall.Close(nsDir)
	defer syscall.Close(mntNS)
	cat, err := lookPath("cat")
	if err != nil {
		return err
	}
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return wrap("pipe", err)
	}
	pid, err := syscall.ForkExec(cat, []string{"cat"}, &syscall.ProcAttr{Files: []uintptr{uintptr(p[0]), uintptr(p[0]), uintptr(p[0])}})
	syscall.Close(p[0])
	if err != nil {
		syscall.Close(p[1])
		return wrap("exec "+cat, err)
	}
	errc := make(chan error, 1)
	if pidNS, err := openat(nsDir, "pid_for_children"); err != nil {
		errc <- wrap("open the PID namespace", err)
	} else {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			errc <- enterProc(mntNS, pidNS, t.covers)
		}()
	}
	err = <-errc
	syscall.Close(p[1])
	var ws syscall.WaitStatus
	for {
		if _, werr := syscall.Wait4(pid, &ws, 0, nil); werr != syscall.EINTR {
			break
		}
	}
	return err
}

// serve takes calls from the control socket until it is closed or calls
// were taken (calls > 0). A message carries, as SCM_RIGHTS, the call's
// socket, its stdout and stderr, and the call's cgroups' tasks files.
func (t *template) serve(calls int) {
	oob := make([]byte, syscall.CmsgSpace(16*4))
	buf := make([]byte, 16)
	for n := 0; calls == 0 || n < calls; n++ {
		_, oobn, _, _, err := syscall.Recvmsg(t.ctl, buf, oob, syscall.MSG_CMSG_CLOEXEC)
		if err == syscall.EINTR {
			n--
			continue
		}
		if err != nil {
			return
		}
		var fds []int
		if msgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				if got, err := syscall.ParseUnixRights(&m); err == nil {
					fds = append(fds, got...)
				}
			}
		}
		if len(fds) == 0 {
			return // end of file: the worker let the template go
		}
		if len(fds) < 3 {
			for _, fd := range fds {
				syscall.Close(fd)
			}
			continue
		}
		t.wg.Add(1)
		go t.call(fds[0], fds[1], fds[2], fds[3:])
	}
}

// call serves one call: it reads its command line from sock (as
// [Spec.Args] gives it without the program's path, NUL-terminated, to
// end of file), starts it with out and err as its stdout and stderr in
// the cgroups of tasks, and replies on sock.
func (t *template) call(sock, out, errFD int, tasks []int) {
	defer t.wg.Done()
	defer syscall.Close(sock)
	reply := func(kind byte, msg string) {
		_, _ = syscall.Write(sock, append([]byte{kind}, msg...))
	}
	fail := func(err error) {
		syscall.Close(out)
		syscall.Close(errFD)
		for _, fd := range tasks {
			syscall.Close(fd)
		}
		reply(ReplyFailed, err.Error())
	}
	data, err := readFD(sock, maxCmdline)
	if err != nil {
		fail(wrap("read the command line", err))
		return
	}
	if data == "" || data[len(data)-1] != 0 {
		fail(newError("the command line read is cut short"))
		return
	}
	c, err := parse(split(data[:len(data)-1], "\x00"))
	if err != nil {
		fail(err)
		return
	}
	if c.seccomp != 0 || len(c.noexec) > 0 {
		fail(newError("a template's call names no seccomp filter nor noexec directories: the template's apply"))
		return
	}
	// Everything from here happens to this thread alone, which ends with
	// the goroutine.
	runtime.LockOSThread()
	pid, init, hold, err := t.start(c, out, errFD, tasks)
	syscall.Close(out)
	syscall.Close(errFD)
	for _, fd := range tasks {
		syscall.Close(fd)
	}
	if err == nil {
		reply(ReplyStarted, "")
	}
	var ws syscall.WaitStatus
	if pid > 0 {
		if werr := wait(pid, &ws); err == nil {
			err = wrap("wait", werr)
		}
	}
	// The init goes, and the kernel kills what is left of the call,
	// before the reply says it ended.
	if init > 0 {
		syscall.Close(hold)
		_ = syscall.Kill(init, syscall.SIGKILL)
		var iws syscall.WaitStatus
		_ = wait(init, &iws)
	}
	if err != nil {
		reply(ReplyFailed, err.Error())
		return
	}
	reply(ReplyExited, strconv.Itoa(int(ws)))
}

// The first process of a call's PID namespace (its init) is /bin/sh
// waiting on its stdin, a pipe the template closes once the command
// ended, with SIGCHLD ignored so that the kernel reaps at once whatever
// is orphaned in the namespace and reparented to it. It is forked before
// the call's execute restriction and the command is forked after it,
// from the template's thread, not from the init: the init runs no
// program of the call's and nothing the call starts is its child, and
// Landlock keeps the restricted command from tracing it or writing its
// memory (a domain reaches only its own and those nested in it). When
// the init exits, the kernel kills whatever is left in the namespace. The
// command, not the init, is what the call runs: kill $$ works as
// anywhere (the kernel drops signals sent to an init from inside its
// namespace).
const (
	callInit       = "/bin/sh"
	callInitScript = "trap '' CHLD; read x"
)

// start makes the call's sandbox on this thread and forks the command in
// it; it returns the command's pid and the init's (as the template sees
// them) and the write end of the init's stdin, to close once the command
// ended.
func (t *template) start(c command, out, errFD int, tasks []int) (pid, init, hold int, err error) {
	if len(c.argv) < 3 || c.argv[1] != "-c" || !hasPrefix(c.argv[2], GatePrologue) {
		return 0, 0, -1, newError("a template's command is a shell's -c script beginning with its gate")
	}
	mntNS, nsDir, err := t.isolate(tasks)
	if err != nil {
		return 0, 0, -1, err
	}
	defer syscall.Close(nsDir)
	defer syscall.Close(mntNS)
	if c.chdir != "" {
		if err := syscall.Chdir(c.chdir); err != nil {
			return 0, 0, -1, wrap("chdir "+c.chdir, err)
		}
	}
	prog, err := lookPath(c.argv[0])
	if err != nil {
		return 0, 0, -1, err
	}
	null, err := syscall.Open("/dev/null", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, -1, wrap("open /dev/null", err)
	}
	defer syscall.Close(null)
	if err := prctl(prSetNoNewPrivs, 1); err != nil {
		return 0, 0, -1, wrap("no_new_privs", err)
	}
	if err := dropThread(c); err != nil {
		return 0, 0, -1, err
	}
	if c.home != "" {
		if err := syscall.Mkdir(c.home, 0o700); err != nil {
			return 0, 0, -1, wrap("make the home "+c.home, err)
		}
	}
	if err := loadFilter(t.filter); err != nil {
		return 0, 0, -1, err
	}
	var initIn [2]int
	if err := syscall.Pipe2(initIn[:], syscall.O_CLOEXEC); err != nil {
		return 0, 0, -1, wrap("make the init's pipe", err)
	}
	init, err = syscall.ForkExec(callInit, []string{"sh", "-c", callInitScript}, &syscall.ProcAttr{
		Files: []uintptr{uintptr(initIn[0]), uintptr(null), uintptr(null)},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	syscall.Close(initIn[0])
	if err != nil {
		syscall.Close(initIn[1])
		return 0, 0, -1, wrap("exec "+callInit, err)
	}
	hold = initIn[1]
	// The namespace has its PID 1: its procfs can be made, by a thread
	// of the template's own (this one has dropped everything).
	if err := t.mountProc(mntNS, nsDir); err != nil {
		return 0, init, hold, err
	}
	if c.restrict {
		if err := restrictExec(c.allow, c.allowDirs); err != nil {
			return 0, init, hold, err
		}
	}
	var gate [2]int
	if err := syscall.Pipe2(gate[:], syscall.O_CLOEXEC); err != nil {
		return 0, init, hold, wrap("make the gate", err)
	}
	defer syscall.Close(gate[1])
	pid, err = syscall.ForkExec(prog, c.argv, &syscall.ProcAttr{
		Env:   syscall.Environ(),
		Files: []uintptr{uintptr(null), uintptr(out), uintptr(errFD), uintptr(gate[0])},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	syscall.Close(gate[0])
	if err != nil {
		return 0, init, hold, wrap("exec "+prog, err)
	}
	// Out of the call's cgroups before the worker counts what is left
	// in them: a thread that cannot leave ends the template (fail exits),
	// and the kernel its calls with it, rather than stay counted in the
	// call's.
	for _, fd := range t.home {
		if _, err := syscall.Write(fd, []byte("0")); err != nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			fail(wrap("return to the template's cgroup", err))
		}
	}
	// The call's limits, on the command (the same user as this thread
	// now) while it waits at its gate.
	for _, l := range t.limits {
		rl := [2]uint64{l.Value, l.Value}
		if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), uintptr(l.Resource), uintptr(unsafe.Pointer(&rl[0])), 0, 0, 0); errno != 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return pid, init, hold, wrap("set resource limit "+strconv.Itoa(l.Resource)+" of the call", errno)
		}
	}
	if _, err := syscall.Write(gate[1], []byte{'\n'}); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return pid, init, hold, wrap("open the gate", err)
	}
	return pid, init, hold, nil
}

// mountProc mounts, on a thread of its own that ends with it, a procfs
// instance of the PID namespace of the children of this thread (nsDir is
// its /proc/thread-self/ns) on /proc of its mount namespace mntNS, with
// the read-only covers of the template's own /proc.
func (t *template) mountProc(mntNS, nsDir int) error {
	pidNS, err := openat(nsDir, "pid_for_children")
	if err != nil {
		return wrap("open the call's PID namespace", err)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		errc <- enterProc(mntNS, pidNS, t.covers)
	}()
	return <-errc
}

// enterProc makes a procfs instance of pidNS (closed here), enters the
// mount namespace mntNS and mounts it on /proc there, with covers.
func enterProc(mntNS, pidNS int, covers []string) error {
	mnt, err := procMount(pidNS)
	syscall.Close(pidNS)
	if err != nil {
		return err
	}
	defer syscall.Close(mnt)
	if err := syscall.Unshare(syscall.CLONE_FS); err != nil {
		return wrap("unshare CLONE_FS", err)
	}
	if _, _, errno := syscall.RawSyscall(uintptr(sysSetns), uintptr(mntNS), syscall.CLONE_NEWNS, 0); errno != 0 {
		return wrap("enter the call's mount namespace", errno)
	}
	if err := moveMount(mnt, "/proc"); err != nil {
		return err
	}
	for _, mp := range covers {
		if err := syscall.Mount(mp, mp, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			if err == syscall.ENOENT {
				continue
			}
			return wrap("cover "+mp, err)
		}
		if err := syscall.Mount("", mp, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
			return wrap("cover "+mp+" read-only", err)
		}
	}
	return nil
}

// Linux's numbers for the new mount API (the same on every
// architecture).
const (
	sysFsopen         = 430
	sysFsconfig       = 431
	sysFsmount        = 432
	fsconfigSetFD     = 5
	fsconfigCmdCreate = 6
	fsopenCloexec     = 1
	fsmountCloexec    = 1
	mountAttrNosuid   = 0x2
	mountAttrNodev    = 0x4
	mountAttrNoexec   = 0x8
)

// procMount is a detached mount of a procfs instance of the PID
// namespace pidNS.
func procMount(pidNS int) (int, error) {
	name, _ := syscall.BytePtrFromString("proc")
	fs, _, errno := syscall.Syscall(sysFsopen, uintptr(unsafe.Pointer(name)), fsopenCloexec, 0)
	if errno != 0 {
		return -1, wrap("fsopen proc", errno)
	}
	defer syscall.Close(int(fs))
	key, _ := syscall.BytePtrFromString("pidns")
	if _, _, errno := syscall.Syscall6(sysFsconfig, fs, fsconfigSetFD, uintptr(unsafe.Pointer(key)), 0, uintptr(pidNS), 0); errno != 0 {
		return -1, wrap("procfs pidns", errno)
	}
	if _, _, errno := syscall.Syscall6(sysFsconfig, fs, fsconfigCmdCreate, 0, 0, 0, 0); errno != 0 {
		return -1, wrap("make the call's procfs", errno)
	}
	mnt, _, errno := syscall.Syscall(sysFsmount, fs, fsmountCloexec, mountAttrNosuid|mountAttrNodev|mountAttrNoexec)
	if errno != 0 {
		return -1, wrap("fsmount proc", errno)
	}
	return int(mnt), nil
}

// openat opens name in the directory dir, read-only.
func openat(dir int, name string) (int, error) {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	fd, _, errno := syscall.Syscall6(syscall.SYS_OPENAT, uintptr(dir), uintptr(unsafe.Pointer(p)), syscall.O_RDONLY|syscall.O_CLOEXEC, 0, 0, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// isolate gives this thread a call's namespaces and mounts (see the
// comment at the top), with /proc an empty read-only directory until
// mountProc, and moves it into the cgroups of tasks. It returns the
// thread's mount namespace and its /proc/thread-self/ns directory (for
// the PID namespace of its children, once there is one).
func (t *template) isolate(tasks []int) (mntNS, nsDir int, err error) {
	if err := syscall.Unshare(syscall.CLONE_NEWNS | syscall.CLONE_FS); err != nil {
		return -1, -1, wrap("unshare the mount namespace", err)
	}
	if nsDir, err = syscall.Open("/proc/thread-self/ns", oPath|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0); err != nil {
		return -1, -1, wrap("open /proc/thread-self/ns", err)
	}
	if mntNS, err = openat(nsDir, "mnt"); err != nil {
		syscall.Close(nsDir)
		return -1, -1, wrap("open the mount namespace", err)
	}
	if err := t.mounts(tasks); err != nil {
		syscall.Close(nsDir)
		syscall.Close(mntNS)
		return -1, -1, err
	}
	return mntNS, nsDir, nil
}

// mounts makes a call's mounts in this thread's mount namespace, moves
// the thread into the cgroups of tasks, and unshares the namespaces of
// its children.
func (t *template) mounts(tasks []int) error {
	// Clones of the mounts to keep, taken before /tmp and /dev/shm are
	// covered.
	clones := make([]int, 0, len(t.keep))
	defer func() {
		for _, fd := range clones {
			syscall.Close(fd)
		}
	}()
	for _, mp := range t.keep {
		fd, err := openTree(mp)
		if err != nil {
			return wrap("clone the mount "+mp, err)
		}
		clones = append(clones, fd)
	}
	flags := uintptr(syscall.MS_NOSUID | syscall.MS_NODEV)
	if t.noexec {
		flags |= syscall.MS_NOEXEC
	}
	for _, d := range []string{"/tmp", "/dev/shm"} {
		if err := syscall.Mount("tmpfs", d, "tmpfs", flags, "mode=1777"); err != nil {
			return wrap("mount a tmpfs on "+d, err)
		}
	}
	for i, mp := range t.keep {
		if err := attach(clones[i], mp); err != nil {
			return err
		}
	}
	if err := syscall.Mount("devpts", "/dev/pts", "devpts", syscall.MS_NOSUID|syscall.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620"); err != nil {
		return wrap("mount a devpts instance", err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev", &st); err != nil {
		return wrap("statfs /dev", err)
	}
	if err := syscall.Mount("", "/dev", "", uintptr(syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY)|mountFlags(int64(st.Flags)), ""); err != nil {
		return wrap("remount /dev read-only", err)
	}
	// Nothing of /proc until the call's own procfs is there.
	if err := syscall.Mount("tmpfs", "/proc", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC|syscall.MS_RDONLY, "mode=0555"); err != nil {
		return wrap("cover /proc", err)
	}
	for _, fd := range tasks {
		if _, err := syscall.Write(fd, []byte("0")); err != nil {
			return wrap("join the call's cgroup", err)
		}
	}
	ns := syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | cloneNewCgroup
	if !t.network {
		ns |= syscall.CLONE_NEWNET
	}
	if err := syscall.Unshare(ns); err != nil {
		return wrap("unshare the call's namespaces", err)
	}
	return nil
}

// openTree is a detached clone of the mount at mp with those beneath it.
func openTree(mp string) (int, error) {
	p, err := syscall.BytePtrFromString(mp)
	if err != nil {
		return -1, err
	}
	fd, _, errno := syscall.Syscall(sysOpenTree, uintptr(int64(atFDCWD)), uintptr(unsafe.Pointer(p)), openTreeClone|atRecursive|syscall.O_CLOEXEC)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// atFDCWD is AT_FDCWD as the system calls take it.
var atFDCWD = -100

// attach moves the detached mount fd to mp, making mp (a directory or a
// file, as the mount's root is) and its parents (mode 0755) first.
func attach(fd int, mp string) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return wrap("stat the clone of "+mp, err)
	}
	for i := 1; i < len(mp); i++ {
		if mp[i] == '/' {
			if err := syscall.Mkdir(mp[:i], 0o755); err != nil && err != syscall.EEXIST {
				return wrap("make "+mp[:i], err)
			}
		}
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		if err := syscall.Mkdir(mp, 0o755); err != nil && err != syscall.EEXIST {
			return wrap("make "+mp, err)
		}
	} else {
		f, err := syscall.Open(mp, syscall.O_CREAT|syscall.O_WRONLY|syscall.O_CLOEXEC, 0o444)
		if err != nil {
			return wrap("make "+mp, err)
		}
		syscall.Close(f)
	}
	return moveMount(fd, mp)
}

// moveMount attaches the detached mount fd at mp.
func moveMount(fd int, mp string) error {
	p, err := syscall.BytePtrFromString(mp)
	if err != nil {
		return err
	}
	empty := [1]byte{}
	if _, _, errno := syscall.Syscall6(sysMoveMount, uintptr(fd), uintptr(unsafe.Pointer(&empty[0])), uintptr(int64(atFDCWD)), uintptr(unsafe.Pointer(p)), moveMountFEmptyPath, 0); errno != 0 {
		return wrap("mount on "+mp, errno)
	}
	return nil
}

// dropThread is dropPrivileges for this thread alone: each step is the
// raw system call, which changes the calling thread's credentials
// (syscall.Setresuid and the like change every thread's).
func dropThread(c command) error {
	if err := dropBounding(); err != nil {
		return err
	}
	if !c.drop && !c.root {
		return newError("a template's call names --user or --root")
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_SETGROUPS, 0, 0, 0); errno != 0 {
		return wrap("clear the supplementary groups", errno)
	}
	if c.drop {
		g, u := uintptr(c.gid), uintptr(c.uid)
		if _, _, errno := syscall.RawSyscall(syscall.SYS_SETRESGID, g, g, g); errno != 0 {
			return wrap("switch group", errno)
		}
		if _, _, errno := syscall.RawSyscall(syscall.SYS_SETRESUID, u, u, u); errno != 0 {
			return wrap("switch user", errno)
		}
	}
	return clearCaps()
}

// loadFilter loads the seccomp program prog on this thread.
func loadFilter(prog string) error {
	fprog := struct {
		len    uint16
		filter unsafe.Pointer
	}{uint16(len(prog) / 8), unsafe.Pointer(unsafe.StringData(prog))}
	const prSetSeccomp, seccompModeFilter = 22, 2
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetSeccomp, seccompModeFilter, uintptr(unsafe.Pointer(&fprog)), 0, 0, 0); errno != 0 {
		return wrap("load the seccomp filter", errno)
	}
	return nil
}

// wait reaps the child pid into ws.
func wait(pid int, ws *syscall.WaitStatus) error {
	for {
		_, err := syscall.Wait4(pid, ws, 0, nil)
		if err != syscall.EINTR {
			return err
		}
	}
}
