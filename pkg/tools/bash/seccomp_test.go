package bash

import (
	"encoding/binary"
	"testing"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompData is struct seccomp_data laid out for x/net/bpf's VM, which
// loads 32-bit words big-endian: each word the kernel would load natively
// (little-endian) sits at its native offset.
func seccompData(nr int32, archID uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], uint32(nr))
	binary.BigEndian.PutUint32(b[4:], archID)
	for i, a := range args {
		off := 16 + 8*i
		binary.BigEndian.PutUint32(b[off:], uint32(a))       // low word first (little-endian)
		binary.BigEndian.PutUint32(b[off+4:], uint32(a>>32)) // then the high word
	}
	return b
}

// TestSeccompProgramDecisions runs the compiled filter in a BPF VM on
// crafted system calls: the foreign ABIs that would bypass a deny list,
// argument checks on clone and personality, and ordinary calls. The
// numbers are the machine's (x/sys/unix's table for GOARCH); the x32 ABI
// exists on x86-64 only, so only there is its row checked.
func TestSeccompProgramDecisions(t *testing.T) {
	pol, err := seccompPolicy()
	if err != nil {
		t.Fatal(err)
	}
	body, err := pol.Assemble()
	if err != nil {
		t.Fatal(err)
	}
	info, _ := arch.GetInfo("")
	prog := append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionErrno) | uint32(unix.ENOSYS)},
	}, body...)
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	const x32Bit = 0x40000000
	allow := uint32(seccomp.ActionAllow)
	eperm := uint32(seccomp.ActionErrno) | uint32(unix.EPERM)
	enosys := uint32(seccomp.ActionErrno) | uint32(unix.ENOSYS)
	native := uint32(info.ID)
	// Another ABI the kernel may run next to the machine's own (i386's
	// int 0x80 on x86-64, 32-bit ARM on arm64).
	foreign := arch.I386
	switch info.ID {
	case arch.I386.ID:
		foreign = arch.X86_64
	case arch.AARCH64.ID:
		foreign = arch.ARM
	}
	type decision struct {
		name string
		data []byte
		want uint32
	}
	var foreignABI []decision
	if info.ID == arch.X86_64.ID {
		foreignABI = append(foreignABI, decision{"ptrace through x32", seccompData(unix.SYS_PTRACE|x32Bit, native), enosys})
	}
	for _, tt := range append([]decision{
		{"getpid", seccompData(unix.SYS_GETPID, native), allow},
		{"ptrace", seccompData(unix.SYS_PTRACE, native), eperm},
		{"ptrace of another ABI (" + foreign.Name + ")", seccompData(int32(foreign.SyscallNames["ptrace"]), uint32(foreign.ID)), enosys},
		{"unshare", seccompData(unix.SYS_UNSHARE, native, unix.CLONE_NEWUSER), eperm},
		{"clone of a thread", seccompData(unix.SYS_CLONE, native, unix.CLONE_VM|unix.CLONE_FS|unix.CLONE_FILES|unix.CLONE_SIGHAND|unix.CLONE_THREAD), allow},
		{"clone of a process", seccompData(unix.SYS_CLONE, native, uint64(unix.SIGCHLD)), allow},
		{"clone into a user namespace", seccompData(unix.SYS_CLONE, native, unix.CLONE_NEWUSER|uint64(unix.SIGCHLD)), eperm},
		{"clone into a network namespace", seccompData(unix.SYS_CLONE, native, unix.CLONE_NEWNET), eperm},
		{"clone3", seccompData(unix.SYS_CLONE3, native), enosys},
		{"personality query", seccompData(unix.SYS_PERSONALITY, native, 0xffffffff), allow},
		{"personality linux", seccompData(unix.SYS_PERSONALITY, native, 0), allow},
		{"personality READ_IMPLIES_EXEC", seccompData(unix.SYS_PERSONALITY, native, 0x0400000), eperm},
		{"personality ADDR_NO_RANDOMIZE", seccompData(unix.SYS_PERSONALITY, native, 0x0040000), eperm},
		{"personality high bits", seccompData(unix.SYS_PERSONALITY, native, 1<<32), eperm},
		{"io_uring_setup", seccompData(unix.SYS_IO_URING_SETUP, native), eperm},
		{"bpf", seccompData(unix.SYS_BPF, native), eperm},
		{"open_by_handle_at", seccompData(unix.SYS_OPEN_BY_HANDLE_AT, native), eperm},
		{"read", seccompData(unix.SYS_READ, native), allow},
		{"execve", seccompData(unix.SYS_EXECVE, native), allow},
	}, foreignABI...) {
		got, err := vm.Run(tt.data)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if uint32(got) != tt.want {
			t.Errorf("%s: filter returns %#x, want %#x", tt.name, got, tt.want)
		}
	}
	// The program bwrap gets is this one.
	raw, err := seccompProgram()
	if err != nil || len(raw) != 8*len(prog) {
		t.Errorf("seccompProgram: %d bytes, %v; want %d instructions", len(raw), err, len(prog))
	}
}
