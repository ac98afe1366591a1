package bash

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sandbox kinds.
const (
	// KindBwrap: commands run inside bubblewrap.
	KindBwrap = "bwrap"
	// KindNone: commands run without a sandbox.
	KindNone = "none"
)

// ErrSandboxUnavailable is returned by Detect in ModeRequire when
// bubblewrap is missing or does not work on this machine.
var ErrSandboxUnavailable = errors.New("sandbox unavailable")

// nobody is the uid and gid commands run as when the worker is root and
// the workspace belongs to root.
const nobody = 65534

// probeTimeout bounds the start-up check that bubblewrap works.
const probeTimeout = 30 * time.Second

// Sandbox says what isolation commands get, as Detect found it.
type Sandbox struct {
	// Mode is the mode asked for.
	Mode Mode `json:"mode"`
	// Kind is KindBwrap or KindNone.
	Kind string `json:"kind"`
	// Bwrap is the path of the bwrap program; empty for KindNone.
	Bwrap string `json:"bwrap,omitempty"`
	// Version is what bwrap --version printed, e.g. "bubblewrap 0.8.0".
	Version string `json:"version,omitempty"`
	// Setpriv is the path of setpriv, which drops root inside the sandbox;
	// set only when the worker runs as root.
	Setpriv string `json:"setpriv,omitempty"`
	// Reason says why Kind is KindNone.
	Reason string `json:"reason,omitempty"`

	hide []string // Config.Hide
	// reveal are directories under a hidden one shown again, read-only
	// (programs of the PATH installed under /root).
	reveal []string
	// view is what every call sees of the host (systemView), built once
	// by Detect.
	view []string
	// reads are the roots outside the workspace one call may read, set
	// on the call's copy (Access.Reads).
	reads []string
	// ownDev: /dev is made of the few devices commands use, bound one
	// by one, instead of bwrap's --dev, for a worker that is not root:
	// bwrap builds its --dev as root of a user namespace and runs the
	// command in a second one nested in it, whose capabilities cannot
	// remount the sandbox's mounts noexec.
	ownDev bool
}

// devArgs are the bwrap arguments that make the sandbox's /dev.
func (s Sandbox) devArgs() []string {
	if !s.ownDev {
		return []string{"--dev", "/dev"}
	}
	a := []string{"--perms", "0755", "--tmpfs", "/dev"}
	for _, d := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		if _, err := os.Stat("/dev/" + d); err == nil {
			a = append(a, "--dev-bind", "/dev/"+d, "/dev/"+d)
		}
	}
	return append(a, "--symlink", "/proc/self/fd", "/dev/fd", "--symlink", "/proc/self/fd/0", "/dev/stdin",
		"--symlink", "/proc/self/fd/1", "/dev/stdout", "--symlink", "/proc/self/fd/2", "/dev/stderr")
}

// Enabled reports whether commands run inside bubblewrap.
func (s Sandbox) Enabled() bool { return s.Kind == KindBwrap }

// String describes the sandbox in one line for the start-up log.
func (s Sandbox) String() string {
	if !s.Enabled() {
		return "none: commands run WITHOUT a sandbox (" + s.Reason + ")"
	}
	msg := "bwrap " + s.Bwrap
	if s.Version != "" {
		msg += " (" + s.Version + ")"
	}
	if s.Setpriv != "" {
		msg += ", root dropped with " + s.Setpriv
	}
	return msg
}

// Detect says what Config.Sandbox = mode will use: bubblewrap (its path
// and version) or none (and why). In ModeAuto and ModeRequire it looks up
// bwrap in PATH (and setpriv when the worker runs as root) and runs one
// trivial command in a sandbox built like the real ones, so that a bwrap
// that is installed but cannot create namespaces here is found at start-up
// rather than on the first call (the probe loads the seccomp filter too).
// ModeAuto falls back to none; ModeRequire returns an error wrapping
// ErrSandboxUnavailable. An unknown mode is an error wrapping
// ErrInvalidMode.
func Detect(mode Mode) (Sandbox, error) {
	m, err := ParseMode(string(mode))
	if err != nil {
		return Sandbox{}, err
	}
	if m == ModeOff {
		return Sandbox{Mode: m, Kind: KindNone, Reason: "sandbox mode off"}, nil
	}
	s, reason := find()
	s.Mode = m
	if reason == "" {
		return s, nil
	}
	if m == ModeRequire {
		return Sandbox{}, fmt.Errorf("%w: sandbox mode require: %s", ErrSandboxUnavailable, reason)
	}
	return Sandbox{Mode: m, Kind: KindNone, Reason: reason}, nil
}

// find looks for a working bubblewrap; reason is empty when it found one.
func find() (s Sandbox, reason string) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return s, "bwrap not found in PATH: install the bubblewrap package"
	}
	s = Sandbox{Kind: KindBwrap, Bwrap: bwrap, view: systemView(), ownDev: os.Geteuid() != 0}
	if os.Geteuid() == 0 {
		p, err := exec.LookPath("setpriv")
		if err != nil {
			return s, "the worker runs as root and setpriv (util-linux), needed to drop root inside bwrap, is not in PATH"
		}
		s.Setpriv = p
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, bwrap, "--version").Output()
	if err != nil {
		return s, fmt.Sprintf("%s --version failed: %v", bwrap, err)
	}
	s.Version = strings.TrimSpace(string(out))
	truePath, err := exec.LookPath("true")
	if err != nil {
		truePath = "/bin/true"
	}
	id := identity{}
	if s.Setpriv != "" {
		id = identity{drop: true, uid: nobody, gid: nobody}
	}
	filter, err := seccompFile()
	if err != nil {
		return s, err.Error()
	}
	defer filter.Close()
	argv := s.argv("", "/", false, id, []string{"--seccomp", "3"}, []string{truePath})
	probe := exec.CommandContext(ctx, argv[0], argv[1:]...)
	probe.ExtraFiles = []*os.File{filter} // fd 3
	probe.Env = []string{"PATH=" + defaultPath}
	var stderr bytes.Buffer
	probe.Stderr = &stderr
	if err := probe.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return s, fmt.Sprintf("bwrap at %s cannot build a sandbox here: %s", bwrap, msg)
	}
	return s, ""
}

// identity is who the command runs as.
type identity struct {
	drop     bool // switch to uid:gid (the worker is root)
	root     bool // stay root, without any capability (root-owned workspace)
	uid, gid uint32
	// init: the command line starts with the sandbox's first program,
	// which drops root itself (pkg/sandboxinit), not with setpriv.
	init bool
	// noexec: that program remounts the writable places noexec, for
	// which it gets CAP_SYS_ADMIN until it drops every capability.
	noexec bool
	// template: that program is a sandbox template (template.go),
	// which keeps what it needs to make each call's namespaces and
	// mounts and to drop root on the call's thread.
	template bool
}

// rootNoCaps is the setpriv command line that leaves root without any
// capability (bounding, inheritable and ambient sets emptied, no new
// privileges, no supplementary groups) before it execs the command.
func rootNoCaps(setpriv string) []string {
	return []string{setpriv, "--clear-groups", "--no-new-privs", "--bounding-set=-all", "--inh-caps=-all", "--"}
}

// argv builds the bwrap command line that runs inner with the workspace
// ws (empty: none) as the only writable directory besides private /tmp and
// /dev/shm, starting in cwd. The host is shown as s.view (the system's
// directories, read-only) and s.reads (read-only), and nothing else of
// it. mounts are further bwrap mount arguments, applied after the
// workspace's (the call's grant, gitMounts).
func (s Sandbox) argv(ws, cwd string, network bool, id identity, mounts, inner []string) []string {
	a := append([]string{s.Bwrap}, s.view...)
	a = append(a, s.devArgs()...)
	a = append(a,
		"--perms", "1777", "--tmpfs", "/dev/shm",
		"--proc", "/proc",
		"--perms", "1777", "--tmpfs", "/tmp",
	)
	a = append(a, s.readBinds(s.reads)...)
	shown := binds(a)
	for _, h := range s.hide {
		if covered(shown, h) {
			a = append(a, "--perms", "0755", "--tmpfs", h)
		}
	}
	for _, r := range s.reveal {
		if !slices.Contains(shown, r) && covered(shown, r) {
			a = append(a, "--ro-bind", r, r)
		}
	}
	if ws != "" {
		// The workspace may lie under a directory the sandbox replaces
		// with a fresh tmpfs; bwrap would create the parents root-only,
		// so an unprivileged user could not reach the workspace by its
		// absolute path. Create them searchable.
		for _, d := range parentsUnder(ws, append([]string{"/tmp", "/dev/shm"}, s.hide...)...) {
			a = append(a, "--perms", "0755", "--dir", d)
		}
		a = append(a, "--bind", ws, ws)
	}
	a = append(a, mounts...)
	a = append(a,
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
	)
	if !network {
		a = append(a, "--unshare-net")
	}
	a = append(a, "--die-with-parent", "--new-session", "--cap-drop", "ALL")
	if id.init && id.template {
		a = append(a, "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP",
			"--cap-add", "CAP_SYS_CHROOT", "--chdir", cwd, "--")
		return append(a, inner...)
	}
	if id.init && id.noexec {
		// The first program remounts the writable places noexec
		// (pkg/sandboxinit), then drops every capability.
		a = append(a, "--cap-add", "CAP_SYS_ADMIN")
		if !id.drop && !id.root {
			a = append(a, "--cap-add", "CAP_SETPCAP")
		}
	}
	if id.drop {
		// Just what setpriv needs to switch to the unprivileged user;
		// setpriv then empties the bounding set, and the uid change
		// clears the rest.
		a = append(a, "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP")
	} else if id.root {
		// What setpriv needs to empty the bounding set and the groups;
		// with no new privileges, the exec that follows grants nothing.
		a = append(a, "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP")
	}
	a = append(a, "--chdir", cwd, "--")
	if id.init {
		return append(a, inner...)
	}
	if id.drop {
		a = append(a, s.Setpriv,
			"--reuid="+strconv.FormatUint(uint64(id.uid), 10),
			"--regid="+strconv.FormatUint(uint64(id.gid), 10),
			"--clear-groups",
			"--no-new-privs",
			"--bounding-set=-all",
			"--inh-caps=-all",
			"--")
	} else if id.root {
		a = append(a, rootNoCaps(s.Setpriv)...)
	}
	return append(a, inner...)
}

// binds are the destinations of the bind mounts among the bwrap
// arguments a.
func binds(a []string) []string {
	var out []string
	for i := 0; i+2 < len(a); i++ {
		if a[i] == "--ro-bind" || a[i] == "--bind" {
			out = append(out, a[i+2])
			i += 2
		}
	}
	return out
}

// covered reports whether p lies in one of the directories dirs.
func covered(dirs []string, p string) bool {
	for _, d := range dirs {
		if _, in := within(d, p); in {
			return true
		}
	}
	return false
}

// parentsUnder lists the directories strictly between each of roots and
// p, outermost first, for the root p lies under.
func parentsUnder(p string, roots ...string) []string {
	for _, root := range roots {
		rel, ok := within(root, p)
		if !ok || rel == "." {
			continue
		}
		var out []string
		d := root
		parts := strings.Split(rel, string(filepath.Separator))
		for _, part := range parts[:len(parts)-1] {
			d = filepath.Join(d, part)
			out = append(out, d)
		}
		return out
	}
	return nil
}

// within reports whether p is root or lies under it (both clean and
// absolute), and p relative to root.
func within(root, p string) (string, bool) {
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", false
	}
	return rel, true
}

// sandboxFiles are the files a sandboxed command's bwrap reads from the
// descriptors it inherits (the seccomp filter, the hold's pipes, data it
// binds read-only), numbered from 3 in the order added, as
// exec.Cmd.ExtraFiles passes them.
type sandboxFiles struct{ files []*os.File }

// add passes f to bwrap and returns its descriptor number.
func (s *sandboxFiles) add(f *os.File) string {
	s.files = append(s.files, f)
	return strconv.Itoa(2 + len(s.files))
}

// data passes a pipe holding data (for --ro-bind-data) and returns its
// descriptor number. Data larger than a pipe surely holds is written
// while bwrap reads it.
func (s *sandboxFiles) data(data []byte) (string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", fmt.Errorf("pass data to the sandbox: %w", err)
	}
	if len(data) <= 4096 {
		_, err = w.Write(data)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			r.Close()
			return "", fmt.Errorf("pass data to the sandbox: %w", err)
		}
	} else {
		go func() {
			_, _ = w.Write(data) // fails when bwrap is gone
			w.Close()
		}()
	}
	return s.add(r), nil
}

// close closes the worker's copies of the files, once bwrap has started.
func (s *sandboxFiles) close() {
	for _, f := range s.files {
		f.Close()
	}
	s.files = nil
}
