//go:build linux

package bash

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/pkg/sandboxinit"
	"github.com/toolgate/toolgate/pkg/tools"
)

// Sandbox templates. A prepared sandbox serves one call; what it costs
// (bwrap building the view's mount tree, the first program's start) is
// paid per call, off its path. A template serves many: one per prepared
// key, started as a prepared sandbox is (bwrap with the view, its limits
// set while held, in cgroups of its own), whose first program
// (pkg/sandboxinit, Template) forks a sandbox per call from its own:
// on a thread of its own, the call gets a copy of the template's mount
// namespace with fresh /tmp, /dev/shm, /dev/pts and /proc, its own PID
// (with an init of its own beside the command: when the command has
// ended, the init is, and the kernel kills whatever the call left), IPC,
// UTS, cgroup and network namespaces, its own
// cgroups (the worker makes them and passes their tasks files), its
// identity dropped, its execute allowlist (Landlock) and the seccomp
// filter, all on that thread alone, which ends once the command started.
// The worker kills a call by its cgroups, never by the template. A
// template is retired (it ends once its calls have) when its mount table
// changed (as a prepared sandbox is discarded) or after maxTemplateCalls
// calls. The template keeps none of a call's resource limits (its Go
// runtime would not start within a call's address space, nor live within
// its CPU time): it sets them on each call's command, which waits at
// its gate (sandboxinit.GatePrologue) meanwhile.
//
// Templates need the worker to be root (the template drops root per
// call) and per-call cgroups in a v1 hierarchy (a thread joins one by
// writing its tasks file; v2 has no per-thread membership outside
// threaded cgroups); elsewhere prepared sandboxes are used as before.

// socketPair is a connected pair of Unix sockets of type typ, both
// close-on-exec.
func socketPair(typ int) (a, b *os.File, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, typ|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "sandbox-socket"), os.NewFile(uintptr(fds[1]), "sandbox-socket"), nil
}

// openTasks opens for writing the tasks files of the cgroups of c (v1).
func openTasks(c *callCgroup) ([]*os.File, error) {
	var out []*os.File
	for _, p := range c.tasks() {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			for _, o := range out {
				o.Close()
			}
			return nil, fmt.Errorf("%w: open %s: %w", errCgroup, p, err)
		}
		out = append(out, f)
	}
	return out, nil
}

// logTemplate logs what a template says on its stderr (why it failed).
func (b *bash) logTemplate(r *os.File) {
	defer r.Close()
	sc := bufio.NewScanner(io.LimitReader(r, 1<<20))
	for sc.Scan() {
		b.log.Warn("bash: sandbox template", "says", sc.Text())
	}
}

// templatePid is the pid of the template in the sandbox whose first
// process is child (bwrap's, which runs the template as its own child
// when it makes a PID namespace, or the template itself).
func templatePid(child int) (int, error) {
	isTemplate := func(pid string) bool {
		b, err := os.ReadFile("/proc/" + pid + "/cmdline")
		return err == nil && strings.HasPrefix(string(b), sandboxinit.Path+"\x00")
	}
	c := strconv.Itoa(child)
	if isTemplate(c) {
		return child, nil
	}
	b, err := os.ReadFile("/proc/" + c + "/task/" + c + "/children")
	if err != nil {
		return 0, err
	}
	for _, f := range strings.Fields(string(b)) {
		if isTemplate(f) {
			return strconv.Atoi(f)
		}
	}
	return 0, errors.New("the template's process is not found")
}

// templated reports whether prepared sandboxes are served by templates
// here (Config.NoTemplate unset, the worker root, call cgroups in v1).
func (b *bash) templated(cfg Config) bool {
	return !cfg.NoTemplate && os.Geteuid() == 0 && (b.id.drop || b.id.root) && !b.userNS &&
		b.cg != nil && !b.cg.v2
}

// errTemplateGone says a template took no call or ended before its
// command did: the call is built anew when it had not started.
var errTemplateGone = errors.New("the sandbox template is gone")

// runTemplated runs the call c of plan p in the template t. ok is false
// when the template could not take it (it is gone; the caller builds the
// call's sandbox itself).
func (b *bash) runTemplated(ctx context.Context, c *tools.Call, t *prepared, p *plan, command, cwd string) (res *result, ok bool, err error) {
	spec := b.initSpec(p.rule.restrict, p.rule.allow)
	spec.AllowDirs = p.rule.dirs
	spec.Chdir, spec.Home = cwd, sandboxHome(b.ws)
	var line bytes.Buffer
	for _, a := range spec.Args(b.direct(sandboxinit.GatePrologue + command))[1:] {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, false, nil
		}
		line.WriteString(a)
		line.WriteByte(0)
	}
	cc, err := b.cg.newCall(b.limits.Processes, b.limits.Memory)
	if err != nil {
		return nil, true, fmt.Errorf("bash: per-call cgroup: %w", err)
	}
	cc.spare = t.tpid
	defer cc.remove()
	tasks, err := openTasks(cc)
	if err != nil {
		return nil, true, fmt.Errorf("bash: per-call cgroup: %w", err)
	}
	var theirs []*os.File // closed once sent
	defer func() {
		for _, f := range theirs {
			f.Close()
		}
	}()
	theirs = append(theirs, tasks...)
	mine, sock, err := socketPair(syscall.SOCK_STREAM)
	if err != nil {
		return nil, true, startError{fmt.Errorf("bash: %w", err)}
	}
	defer mine.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		sock.Close()
		return nil, true, startError{fmt.Errorf("bash: stdout pipe: %w", err)}
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		sock.Close()
		outR.Close()
		outW.Close()
		return nil, true, startError{fmt.Errorf("bash: stderr pipe: %w", err)}
	}
	theirs = append(theirs, sock, outW, errW)
	fds := []int{int(sock.Fd()), int(outW.Fd()), int(errW.Fd())}
	for _, f := range tasks {
		fds = append(fds, int(f.Fd()))
	}
	closeOut := func() { outR.Close(); errR.Close() }
	start := time.Now()
	if err := syscall.Sendmsg(int(t.req.Fd()), []byte{0}, syscall.UnixRights(fds...), nil, 0); err != nil {
		closeOut()
		b.log.Warn("bash: a sandbox template is gone", "call_id", c.ID, "err", err)
		b.pool.retire(t)
		return nil, false, nil
	}
	for _, f := range theirs {
		f.Close()
	}
	theirs = nil
	// Killed when ctx is done: the call's cgroups, and the socket the
	// worker waits on. Stopped (and waited for, if it started) before
	// the socket is closed.
	var killed atomic.Bool
	sockFD := int(mine.Fd())
	killDone := make(chan struct{})
	stopKill := context.AfterFunc(ctx, func() {
		defer close(killDone)
		killed.Store(true)
		cc.kill()
		_ = syscall.Shutdown(sockFD, syscall.SHUT_RDWR)
	})
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			if !stopKill() {
				<-killDone
			}
		})
	}
	defer stop()
	_, err = mine.Write(line.Bytes())
	if err == nil {
		err = syscall.Shutdown(sockFD, syscall.SHUT_WR)
	}
	reply := make([]byte, 1)
	if err == nil {
		_, err = io.ReadFull(mine, reply)
	}
	if err != nil {
		closeOut()
		if ctx.Err() != nil {
			return nil, true, killedError(ctx)
		}
		b.log.Warn("bash: a sandbox template is gone", "call_id", c.ID, "err", err)
		b.pool.retire(t)
		return nil, false, nil
	}
	if reply[0] != sandboxinit.ReplyStarted {
		// Nothing of the command ran: the template is retired and the
		// call built on its path, which says what fails if it is the
		// call's own doing.
		closeOut()
		msg, _ := io.ReadAll(io.LimitReader(mine, 4096))
		b.log.Warn("bash: a sandbox template could not start a call; retired", "call_id", c.ID, "err", string(msg))
		b.pool.retire(t)
		return nil, false, nil
	}
	b.pool.used.Add(1)
	if err := cc.lower(); err != nil {
		cc.kill()
	}
	wait := func() (int, bool, error) {
		rest, err := io.ReadAll(io.LimitReader(mine, 4096))
		stop()
		if err == nil && (len(rest) < 2 || rest[0] != sandboxinit.ReplyExited) {
			err = fmt.Errorf("%w: %q", errTemplateGone, rest)
		}
		var status int
		if err == nil {
			status, err = strconv.Atoi(string(rest[1:]))
		}
		if err != nil {
			// Whatever is left of the call is killed with its cgroup.
			cc.kill()
			if killed.Load() {
				return 128 + int(syscall.SIGKILL), true, nil
			}
			return 0, false, fmt.Errorf("bash: wait: %w", err)
		}
		ws := syscall.WaitStatus(status)
		code := ws.ExitStatus()
		if ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		return code, killed.Load(), nil
	}
	res = &result{out: newCapture(b.maxOut), err: newCapture(b.maxOut), exec: p.rule.why, write: p.write}
	res, err = b.await(ctx, c, wait, outR, errR, cc, start, res, nil)
	return res, true, err
}

// lower sets the call's pids.max to its limit once the thread that
// started the command left (makeCall leaves room for it on v1).
func (c *callCgroup) lower() error {
	if c.max <= 0 {
		return nil
	}
	if err := os.WriteFile(filepath.Join(c.dir, "pids.max"), []byte(strconv.Itoa(c.max)), 0); err != nil {
		return fmt.Errorf("%w: set pids.max in %s: %w", errCgroup, c.dir, err)
	}
	return nil
}
