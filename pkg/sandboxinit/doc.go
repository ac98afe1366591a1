// Package sandboxinit is the first program of a sandboxed bash call, run
// inside bubblewrap after its mounts: it drops root to the workspace's
// owner (or keeps root without any capability), restricts what the call
// may execute with Landlock when the gate resolved its programs, and execs
// the command. It replaces setpriv there, so a restricted call costs the
// same three execs (bwrap, this, the shell) as any other.
//
// It is not a program of its own: the worker's binary is shown in the
// sandbox under the name [Name], and this package's init, which the
// binary runs before the packages that make a worker (it imports only
// the runtime's leaves, and Go initialises packages in import-path order
// as soon as their imports are), sees that name and never returns. A
// program that links it (the bash tool imports it) therefore pays for
// its init the reading of its first argument from /proc/self/cmdline
// (an open, a read of one block and a close) and one comparison; should
// that read fail, it exits as the sandbox's first program would (126),
// since it cannot tell that it is not.
package sandboxinit

import "strconv"

// Name is the name the binary runs under inside the sandbox.
const Name = "toolgate-sandbox-init"

// Dir is the directory of the sandbox where the binary is shown, so that
// the user the command runs as can enter it; Path is the binary there.
const (
	Dir  = "/tmp/.toolgate-init"
	Path = Dir + "/" + Name
)

// Command line (after the program's name):
//
//	[--user=UID:GID | --root] [--restrict-exec [--allow=PATH]... [--allow-dir=DIR]...]
//	[--noexec=DIR]... [--keep-exec=PATH]... [--seccomp=FD] -- COMMAND [ARG]...
//
// --user switches to UID:GID and --root stays root, each with no
// capability left (bounding, ambient, inheritable, permitted and
// effective sets emptied), no supplementary group and no new privileges;
// with neither, the identity is left as it is. --restrict-exec allows
// executing only the regular files given by --allow (a symbolic link
// stands for its target) and fails if the kernel cannot enforce it; an
// --allow that is missing or not a regular file, a directory among them,
// is skipped, which only narrows what may run (it never allows what lies
// beneath a directory). --allow-dir allows executing everything beneath
// the directory DIR (git's exec path, its helpers). --noexec remounts
// every mount point at or under DIR noexec, keeping its other flags
// (read-only, nosuid, nodev, ...), but those named by --keep-exec, before
// it drops privileges, so that no file the command can write is mapped
// executable, even by the dynamic loader; it needs CAP_SYS_ADMIN, and the
// capabilities are dropped afterwards whatever the identity. --seccomp
// loads the seccomp filter (a BPF program) read from the descriptor FD
// after the remounts, as the last step before the exec. COMMAND is run
// with PATH of the environment when it has no slash.
const (
	flagUser     = "--user="
	flagRoot     = "--root"
	flagRestrict = "--restrict-exec"
	flagAllow    = "--allow="
	flagAllowDir = "--allow-dir="
	flagNoexec   = "--noexec="
	flagKeepExec = "--keep-exec="
	flagSeccomp  = "--seccomp="
	flagWait     = "--wait="
	flagChdir    = "--chdir="
	flagHome     = "--home="
)

// Spec is what the program does before it execs the command.
type Spec struct {
	// Drop switches to UID:GID; Root stays root. Either leaves no
	// capability and no supplementary group.
	Drop     bool
	UID, GID uint32
	Root     bool
	// Restrict allows executing only Allow, regular files (the others
	// are skipped).
	Restrict bool
	Allow    []string
	// AllowDirs are directories beneath which everything may be
	// executed (with Restrict).
	AllowDirs []string
	// Noexec are directories whose mount points are remounted noexec,
	// but KeepExec.
	Noexec, KeepExec []string
	// Seccomp is the descriptor of the seccomp filter to load last; 0
	// for none.
	Seccomp int
	// Chdir is the directory the command starts in, entered first;
	// empty: where the program started.
	Chdir string
	// Home is a directory made (mode 0700) after privileges are dropped,
	// owned by the command's user: its home in the sandbox's own /tmp.
	// Empty: none.
	Home string
}

// A first program started with [Template.Args] is a sandbox template
// instead: it serves many calls, forking a fresh sandbox for each from
// its own (template_linux.go); it never execs.

// WaitArgs is the command line of a first program started ahead of its
// call (a prepared sandbox): it writes one byte to the descriptor ready
// and closes it (it waits: the sandbox is built), then reads the rest of
// its command line, as [Spec.Args] would give it without the program's
// path, NUL-terminated arguments, from the descriptor fd until end of
// file, and does what it says. Nothing runs before that: end of file
// with nothing read exits.
func WaitArgs(fd, ready int) []string {
	return []string{Path, flagWait + strconv.Itoa(fd) + ":" + strconv.Itoa(ready)}
}

// Args is the command line, shown at Path, that does s and runs argv.
func (s Spec) Args(argv []string) []string {
	out := []string{Path}
	switch {
	case s.Drop:
		out = append(out, flagUser+strconv.FormatUint(uint64(s.UID), 10)+":"+strconv.FormatUint(uint64(s.GID), 10))
	case s.Root:
		out = append(out, flagRoot)
	}
	if s.Restrict {
		out = append(out, flagRestrict)
		for _, p := range s.Allow {
			out = append(out, flagAllow+p)
		}
		for _, p := range s.AllowDirs {
			out = append(out, flagAllowDir+p)
		}
	}
	for _, p := range s.Noexec {
		out = append(out, flagNoexec+p)
	}
	for _, p := range s.KeepExec {
		out = append(out, flagKeepExec+p)
	}
	if s.Seccomp > 0 {
		out = append(out, flagSeccomp+strconv.Itoa(s.Seccomp))
	}
	if s.Chdir != "" {
		out = append(out, flagChdir+s.Chdir)
	}
	if s.Home != "" {
		out = append(out, flagHome+s.Home)
	}
	return append(append(out, "--"), argv...)
}
