package bash

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// supported reports whether this platform can run the tool.
const supported = true

// waitid(2) constants (linux/wait.h).
const (
	pPID    = 1
	wNoWait = 0x01000000
)

// sysProcAttr puts the child in its own process group, kills it when the
// worker dies, and switches to id's user when id.drop.
func sysProcAttr(id identity) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if id.drop {
		a.Credential = &syscall.Credential{Uid: id.uid, Gid: id.gid, Groups: []uint32{}}
	}
	return a
}

// waitExited blocks until the process pid has exited, without reaping it:
// while it is a zombie its pid, which is also its process group id,
// cannot be given to another process, so the group can still be killed
// safely.
func waitExited(pid int) error {
	var info [128]byte // siginfo_t
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid), uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|wNoWait, 0, 0)
		switch e {
		case 0:
			return nil
		case syscall.EINTR:
			continue
		default:
			return e
		}
	}
}

// group is a started command's process group. Its leader is reaped only
// after finish, so kill never signals a recycled process group id.
type group struct {
	mu        sync.Mutex
	reaped    bool
	cancelled bool
}

// cancel is the exec.Cmd's Cancel: it kills the whole group of the leader
// pid when the call's context is done.
func (g *group) cancel(pid int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.reaped {
		return os.ErrProcessDone
	}
	g.cancelled = true
	return killGroup(pid)
}

// finish kills what is left of the group once its leader pid has exited
// and allows the leader to be reaped. It reports whether cancel ran first.
func (g *group) finish(pid int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.reaped {
		_ = killGroup(pid)
		g.reaped = true
	}
	return g.cancelled
}

// killGroup sends SIGKILL to the process group pgid. It refuses pgid 0 or
// 1, which kill(2) would read as the worker's own group or every process.
func killGroup(pgid int) error {
	if pgid <= 1 {
		return fmt.Errorf("refusing to kill process group %d", pgid)
	}
	err := syscall.Kill(-pgid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// intoCgroup starts the child in the cgroup whose directory fd is open
// (clone3 CLONE_INTO_CGROUP, cgroup v2), so it never runs outside it.
func intoCgroup(a *syscall.SysProcAttr, fd int) {
	a.UseCgroupFD = true
	a.CgroupFD = fd
}

// keyOf identifies the version of the file fi describes: its device,
// inode, size and change times.
func keyOf(fi os.FileInfo) (fileKey, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileKey{}, false
	}
	return fileKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}, true
}
