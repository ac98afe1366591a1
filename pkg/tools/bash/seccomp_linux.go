package bash

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"sync"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Namespace flags of clone(2) and unshare(2): a command may create none.
const cloneNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// deniedSyscalls fail with EPERM inside the sandbox: debugging other
// processes, the kernel keyring, eBPF, mounts, namespaces, io_uring (which
// performs system calls the filter never sees), perf events, loading
// kernels and modules, and the handle-based opens that escape bind mounts.
// The list follows what container runtimes (Docker's default profile) and
// coding-agent sandboxes deny; the root filesystem is read-only and every
// capability is dropped, so most of these would fail anyway, and the filter
// takes the kernel's code for them out of reach.
var deniedSyscalls = []string{
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	"keyctl", "add_key", "request_key",
	"bpf", "perf_event_open", "userfaultfd", "lookup_dcookie",
	"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"unshare", "setns",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
	"swapon", "swapoff", "acct", "quotactl", "syslog", "iopl", "ioperm",
	"open_by_handle_at", "name_to_handle_at",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
	"uselib", "vhangup", "nfsservctl",
}

// allowedPersonalities are the personality(2) values a command may set:
// Linux itself, 32-bit, the 2.6 uname, both, and the query value.
var allowedPersonalities = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// seccompPolicy is the filter's policy for the machine's architecture.
func seccompPolicy() (*seccomp.Policy, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range deniedSyscalls {
		if _, ok := info.SyscallNames[n]; ok { // not every architecture has every call
			names = append(names, n)
		}
	}
	personality := seccomp.ArgumentConditions{}
	for _, v := range allowedPersonalities {
		personality = append(personality, seccomp.Condition{Argument: 0, Operation: seccomp.NotEqual, Value: v})
	}
	// clone's flags are its first argument on every architecture but
	// s390x, which toolgate does not build a filter for (GetInfo fails).
	withArgs := []seccomp.NameWithConditions{
		{Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNamespaces}}},
		{Name: "personality", Conditions: personality},
	}
	return &seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Names: names, NamesWithCondtions: withArgs, Action: seccomp.ActionErrno},
			// clone3 passes its flags in memory the filter cannot read:
			// ENOSYS makes libc fall back to clone, whose flags it can.
			{Names: []string{"clone3"}, Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)},
		},
	}, nil
}

// seccompProgram is the compiled classic BPF program bwrap --seccomp
// loads, as struct sock_filter records in the machine's byte order. Calls
// of a foreign ABI (32-bit int 0x80 on x86-64, x32) are refused before the
// policy: their numbers mean other calls, and they would bypass it.
var seccompProgram = sync.OnceValues(func() ([]byte, error) {
	pol, err := seccompPolicy()
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	info, _ := arch.GetInfo("")
	body, err := pol.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	const archOffset = 4 // struct seccomp_data.arch
	guard := []bpf.Instruction{
		bpf.LoadAbsolute{Off: archOffset, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionErrno) | uint32(unix.ENOSYS)},
	}
	raw, err := bpf.Assemble(append(guard, body...))
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	var b bytes.Buffer
	for _, ins := range raw {
		_ = binary.Write(&b, binary.NativeEndian, struct {
			Op     uint16
			Jt, Jf uint8
			K      uint32
		}{ins.Op, ins.Jt, ins.Jf, ins.K})
	}
	return b.Bytes(), nil
})

// seccompFile is a pipe whose read end holds the filter, for bwrap
// --seccomp; the caller passes it to the child and closes it.
func seccompFile() (*os.File, error) {
	prog, err := seccompProgram()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	// The program (a few hundred bytes) fits in the pipe's buffer.
	_, err = w.Write(prog)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	return r, nil
}
