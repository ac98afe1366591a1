//go:build !linux

package shell

import (
	"errors"
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
