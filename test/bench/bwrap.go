package main

import (
	"os/exec"
	"syscall"
	"time"
)

// bashArgs is the bash calls' command (-tool bash): a sandboxed call that
// does nothing, so that what it costs is the sandbox's.
const bashArgs = `{"command":"true"}`

// bwrapSide is the side that runs bare bubblewrap in this process, the
// floor a sandboxed bash call is measured against (-tool bash).
const bwrapSide = "bwrap"

// bwrapArgv is the bare bubblewrap command the bash calls are held
// against: the whole root read-only, every namespace, its own /dev, /proc
// and /tmp.
var bwrapArgv = []string{"bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
	"--unshare-all", "--die-with-parent", "--new-session", "bash", "-c", "true"}

// think is the pause of each in-flight caller between its calls (-think).
var think time.Duration

// runBwrap runs bwrapArgv once.
func runBwrap() error {
	return exec.Command(bwrapArgv[0], bwrapArgv[1:]...).Run()
}

// cpuChildren is the CPU time of this process's reaped children.
func cpuChildren() time.Duration {
	var ru syscall.Rusage
	must(syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
