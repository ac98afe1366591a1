package bash

import (
	"errors"
	"strings"
)

// ErrStart matches (errors.Is) the error of a command that could not be
// started: the pipes, the sandbox or the process could not be set up.
var ErrStart = errors.New("bash: the command could not be started")

// startError marks err as ErrStart and reads as err.
type startError struct{ err error }

func (e startError) Error() string        { return e.err.Error() }
func (e startError) Unwrap() error        { return e.err }
func (e startError) Is(target error) bool { return target == ErrStart }

// SandboxFailed reports whether a bash result's metadata says bubblewrap
// itself failed to set up the sandbox (it exits 1 with its own "bwrap: "
// message before the command starts).
func SandboxFailed(md map[string]any) bool {
	if md["sandbox"] != KindBwrap {
		return false
	}
	code, _ := md["exit_code"].(int)
	stderr, _ := md["stderr"].(string)
	return code == 1 && strings.HasPrefix(stderr, "bwrap: ")
}
