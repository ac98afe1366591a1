package sandboxinit

import "strconv"

// Flags of a template's command line.
const (
	flagTemplate     = "--template="
	flagCgroupHome   = "--cgroup-home="
	flagTemplateNet  = "--network"
	flagTemplateCall = "--calls="
	flagRlimit       = "--rlimit="
)

// Template is the command line of a sandbox template.
type Template struct {
	// Ctl is the SOCK_SEQPACKET socket the template takes calls on;
	// Ready gets one byte once it can.
	Ctl, Ready int
	// Seccomp is the descriptor of the seccomp filter every call
	// loads.
	Seccomp int
	// Home are the tasks files of the template's own cgroups, which a
	// call's starting thread goes back to.
	Home []int
	// Noexec are directories whose mounts the template remounts noexec
	// once (but KeepExec), and whose fresh tmpfs instances (/tmp,
	// /dev/shm) it mounts noexec per call.
	Noexec, KeepExec []string
	// Network leaves the network namespace shared with the calls;
	// otherwise each call gets its own.
	Network bool
	// Calls bounds the calls taken (0: no bound); the template exits
	// once those it took ended.
	Calls int
	// Limits are the resource limits each call's processes get (the
	// template itself keeps its own), set while the call waits at its
	// gate.
	Limits []Rlimit
}

// Rlimit is one resource limit (soft and hard), as setrlimit(2) names
// the resource.
type Rlimit struct {
	Resource int
	Value    uint64
}

// Args is t's command line, shown at Path.
func (t Template) Args() []string {
	out := []string{Path, flagTemplate + strconv.Itoa(t.Ctl) + ":" + strconv.Itoa(t.Ready), flagSeccomp + strconv.Itoa(t.Seccomp)}
	for _, fd := range t.Home {
		out = append(out, flagCgroupHome+strconv.Itoa(fd))
	}
	for _, p := range t.Noexec {
		out = append(out, flagNoexec+p)
	}
	for _, p := range t.KeepExec {
		out = append(out, flagKeepExec+p)
	}
	if t.Network {
		out = append(out, flagTemplateNet)
	}
	if t.Calls > 0 {
		out = append(out, flagTemplateCall+strconv.Itoa(t.Calls))
	}
	for _, l := range t.Limits {
		out = append(out, flagRlimit+strconv.Itoa(l.Resource)+":"+strconv.FormatUint(l.Value, 10))
	}
	return out
}

// Template replies, the first byte of each message on a call's socket.
const (
	// ReplyStarted: the command started (nothing follows).
	ReplyStarted = 's'
	// ReplyFailed: the command did not start; what failed follows.
	ReplyFailed = 'e'
	// ReplyExited: the command ended; its wait status (decimal)
	// follows.
	ReplyExited = 'x'
)

// GatePrologue is what a template's command line (its shell's -c
// script) must begin with: the command waits on descriptor 3 until the
// template has set its resource limits (it is forked before they can be),
// then closes it; end of file instead (something failed) exits 126.
// REPLY, which read sets, is unset as it was.
const GatePrologue = "{ read -r -n 1 -u 3 && exec 3<&-; } || exit 126; unset -v REPLY; "
