package bash

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/pkg/sandboxinit"
)

// A sandboxed command is held between the sandbox's set-up and its first
// instruction: bwrap (--block-fd) waits, once its namespaces, mounts and
// dropped privileges are in place, until the worker lets it go, and says
// which process waits (--info-fd). Meanwhile the worker sets that
// process's resource limits (prlimit); everything the command starts
// inherits them. No program runs for it: the sandboxed command costs the
// execs of bwrap with the same flags and nothing more. (bwrap starts in
// the call's cgroups: callCgroup.startIn, CLONE_INTO_CGROUP.)

// hold is the worker's end of a held sandbox start: infoR reads what
// bwrap says of the child (--info-fd), blockW lets it go (--block-fd).
type hold struct {
	infoR, blockW *os.File
}

// newHold makes the pipes of a held start; infoW and blockR are the ends
// bwrap gets.
func newHold() (h *hold, infoW, blockR *os.File, err error) {
	h = &hold{}
	if h.infoR, infoW, err = os.Pipe(); err != nil {
		return nil, nil, nil, fmt.Errorf("hold the sandbox: %w", err)
	}
	if blockR, h.blockW, err = os.Pipe(); err != nil {
		h.infoR.Close()
		infoW.Close()
		return nil, nil, nil, fmt.Errorf("hold the sandbox: %w", err)
	}
	return h, infoW, blockR, nil
}

// release reads which process bwrap holds, sets its limits and lets it
// go. A sandbox that failed before or while it was built (bwrap said
// nothing, or its child is gone) is not an error here: bwrap's exit code
// and its own message on stderr say what failed, as without the hold. On
// any other error the held process is killed before anything of the
// command runs: it is never let go without its limits.
func (h *hold) release(l Limits) error {
	_, err := h.releasePid(l)
	return err
}

// releasePid is release, which also returns the pid of the process bwrap
// held; 0 when bwrap failed before it forked or its child is gone.
func (h *hold) releasePid(l Limits) (int, error) {
	var info struct {
		Pid int `json:"child-pid"`
	}
	data, err := io.ReadAll(io.LimitReader(h.infoR, 1<<16))
	if err != nil || json.Unmarshal(data, &info) != nil || info.Pid <= 1 {
		return 0, nil // bwrap failed before it forked
	}
	err = setLimits(info.Pid, l)
	if err == nil {
		_, err = h.blockW.Write([]byte{1})
	}
	switch {
	case err == nil:
		return info.Pid, nil
	case errors.Is(err, syscall.ESRCH), errors.Is(err, syscall.EPIPE):
		return 0, nil // the child is gone: bwrap failed to build the sandbox
	}
	_ = syscall.Kill(info.Pid, syscall.SIGKILL)
	return 0, fmt.Errorf("hold the sandbox: %w", err)
}

// close closes the worker's ends; the held process, if any, is then let
// go, so an error path has killed it first (release).
func (h *hold) close() {
	h.infoR.Close()
	h.blockW.Close()
}

// setLimits sets l (soft and hard) on the process pid, as the prologue's
// ulimit builtin sets them on the command's shell: core files off, and
// each limit that is positive.
func setLimits(pid int, l Limits) error {
	for _, r := range rlimitList(l) {
		rl := unix.Rlimit{Cur: r.Value, Max: r.Value}
		if err := unix.Prlimit(pid, r.Resource, &rl, nil); err != nil {
			return fmt.Errorf("set resource limit %d of the sandbox: %w", r.Resource, err)
		}
	}
	return nil
}

// rlimitList is l as the resource limits setLimits sets: core files off,
// and each limit of l that is positive.
func rlimitList(l Limits) []sandboxinit.Rlimit {
	out := []sandboxinit.Rlimit{{Resource: unix.RLIMIT_CORE, Value: 0}}
	for _, r := range []struct {
		resource int
		v        int64
	}{
		{unix.RLIMIT_CPU, int64(l.CPUSeconds)},
		{unix.RLIMIT_FSIZE, roundUp(l.FileSize, 1024)},
		{unix.RLIMIT_AS, roundUp(l.AddressSpace, 1024)},
		{unix.RLIMIT_NOFILE, int64(l.OpenFiles)},
		{unix.RLIMIT_NPROC, int64(l.Processes)},
	} {
		if r.v > 0 {
			out = append(out, sandboxinit.Rlimit{Resource: r.resource, Value: uint64(r.v)})
		}
	}
	return out
}

// roundUp is v rounded up to a multiple of unit, as ulimit's blocks and
// KiB round it.
func roundUp(v, unit int64) int64 {
	if v <= 0 {
		return v
	}
	return (v + unit - 1) / unit * unit
}
