//go:build !linux

package bash

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// supported reports whether this platform can run the tool: the process
// group handling and the sandbox are Linux-only.
const supported = false

func sysProcAttr(identity) *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

func waitExited(int) error { return errors.ErrUnsupported }

type group struct{}

func (g *group) cancel(int) error { return errors.ErrUnsupported }

func (g *group) finish(int) bool { return false }

func seccompFile() (*os.File, error) { return nil, errors.ErrUnsupported }

type cgroupParent struct{ v2, memory bool }

type callCgroup struct {
	v2     bool
	memDir string
}

func findCgroup() (*cgroupParent, string) { return nil, "cgroups are Linux-only" }

func (*cgroupParent) newCall(int, int64) (*callCgroup, error) { return nil, errors.ErrUnsupported }
func (*callCgroup) startIn(*exec.Cmd) error                   { return errors.ErrUnsupported }
func (*callCgroup) open() (*os.File, error)                   { return nil, errors.ErrUnsupported }
func (*callCgroup) peak() int                                 { return -1 }
func (*callCgroup) remove()                                   {}

func intoCgroup(*syscall.SysProcAttr, int) {}

var errCgroup = errors.New("per-call cgroup")

type hold struct{}

func newHold() (*hold, *os.File, *os.File, error) { return nil, nil, nil, errors.ErrUnsupported }
func (*hold) release(Limits) error                { return errors.ErrUnsupported }
func (*hold) releasePid(Limits) (int, error)      { return 0, errors.ErrUnsupported }
func (*hold) close()                              {}

func keyOf(os.FileInfo) (fileKey, bool) { return fileKey{}, false }
