package bash

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// The sandbox's view of the host is the policy's: the system's program
// and library directories and /etc (without its secrets), read-only, the
// directories of PATH, the roots the policy lets the call read, and the
// workspace; nothing else of the host. What is the same for every call
// (systemView) is built once, by Detect.

// systemDirs are the directories of programs and libraries every call
// sees read-only (a symbolic link among them, as on a merged /usr, is
// shown as the same link).
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

// maxEtcEntries bounds the walk of /etc for secrets; a larger /etc is
// shown without its non-readable directories' contents only as far as
// the walk got, and the rest of it is hidden (fail closed).
const maxEtcEntries = 20000

// systemView is the bwrap arguments that show the system's directories
// read-only, /etc with every entry that not every user may read masked
// (shadow, gshadow, sudoers, private keys: secrets by their mode, which a
// command running as root without capabilities could otherwise read),
// and /etc/resolv.conf's target where it points outside /etc.
func systemView() []string {
	var a []string
	for _, d := range systemDirs {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&fs.ModeSymlink != 0:
			if t, err := os.Readlink(d); err == nil {
				a = append(a, "--symlink", t, d)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", d, d)
		}
	}
	a = append(a, etcMasks("/etc", maxEtcEntries)...)
	if t, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil && !inSystemDirs(t) {
		a = append(a, "--ro-bind", t, t)
	}
	return a
}

// pathView is the bwrap arguments that show the directories of the PATH
// value path outside the system's (pathBinds), read-only, those that a
// command running as id could reach on the host: a user commands are
// dropped to does not get /root/.cargo shown because root's PATH names
// /root/.cargo/bin.
func pathView(path string, id identity) []string {
	var a []string
	for _, d := range pathBinds(path) {
		if !id.drop || reachable(d, id.uid, id.gid) {
			a = append(a, "--ro-bind", d, d)
		}
	}
	return a
}

// reachable reports whether the user uid (group gid) may enter every
// directory from / to dir, by their modes.
func reachable(dir string, uid, gid uint32) bool {
	for d := dir; ; d = filepath.Dir(d) {
		var st syscall.Stat_t
		if err := syscall.Stat(d, &st); err != nil {
			return false
		}
		var bit uint32 = 0o001
		switch {
		case st.Uid == uid:
			bit = 0o100
		case st.Gid == gid:
			bit = 0o010
		}
		if uint32(st.Mode)&bit == 0 { // uint16 on some systems
			return false
		}
		if d == "/" {
			return true
		}
	}
}

// etcMasks are the bwrap arguments that mask, under root, every file
// others may not read (bound over by /dev/null) and every directory
// others may not list or enter (an empty read-only tmpfs). Symbolic
// links are left: what they point to is judged at its own place. Past
// max entries the rest of each directory is hidden whole.
func etcMasks(root string, max int) []string {
	var a []string
	n := 0
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return nil
		}
		n++
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		perm := fi.Mode().Perm()
		switch {
		case d.IsDir() && (perm&0o005 != 0o005 || n > max):
			a = append(a, "--perms", "0755", "--tmpfs", p, "--remount-ro", p)
			return filepath.SkipDir
		case d.IsDir():
		case perm&0o004 == 0 || n > max:
			a = append(a, "--ro-bind", "/dev/null", p)
		}
		return nil
	})
	return a
}

// inSystemDirs reports whether p lies in one of systemDirs.
func inSystemDirs(p string) bool {
	for _, d := range systemDirs {
		if _, in := within(d, p); in {
			return true
		}
	}
	return false
}

// pathBinds are the directories to show for the PATH value path: each
// entry outside the system directories, /tmp and /dev/shm (the call's
// own) that exists, as the directory directly under /root or a home
// directory it lies in (/root/.pyenv for /root/.pyenv/shims: a program
// installed there needs the rest of its installation), or as itself.
func pathBinds(path string) []string {
	var out []string
	for _, dir := range filepath.SplitList(cleanPath(path)) {
		dir = filepath.Clean(dir)
		if dir == "/" || inSystemDirs(dir) || privateDir(dir) {
			continue
		}
		top := dir
		for _, home := range homes(dir) {
			if rel, ok := within(home, dir); ok && rel != "." {
				top = filepath.Join(home, strings.Split(rel, string(filepath.Separator))[0])
			}
		}
		if fi, err := os.Stat(top); err != nil || !fi.IsDir() || slices.Contains(out, top) {
			continue
		}
		out = append(out, top)
	}
	return out
}

// homes are the home directories dir may lie in: /root, and /home/NAME.
func homes(dir string) []string {
	out := []string{"/root"}
	if rel, ok := within("/home", dir); ok && rel != "." {
		out = append(out, filepath.Join("/home", strings.Split(rel, string(filepath.Separator))[0]))
	}
	return out
}

// privateDir reports whether p is or lies under a directory every call
// gets a fresh one of (/tmp, /dev, /proc), or holds one of them.
func privateDir(p string) bool {
	for _, d := range []string{"/tmp", "/dev", "/proc"} {
		_, in := within(d, p)
		_, holds := within(p, d)
		if in || holds {
			return true
		}
	}
	return false
}

// readBinds are the bwrap arguments that show the roots reads, read-only:
// those that exist and are not the call's own private places; a root
// under /tmp or /dev/shm gets its parents made searchable first.
func (s Sandbox) readBinds(reads []string) []string {
	var a []string
	for _, r := range reads {
		if r == "/" || !filepath.IsAbs(r) {
			continue
		}
		if _, err := os.Stat(r); err != nil {
			continue
		}
		_, inTmp := within("/tmp", r)
		_, inShm := within("/dev/shm", r)
		if privateDir(r) && !inTmp && !inShm || r == "/tmp" || r == "/dev/shm" {
			continue
		}
		for _, d := range parentsUnder(r, "/tmp", "/dev/shm") {
			a = append(a, "--perms", "0755", "--dir", d)
		}
		a = append(a, "--ro-bind", r, r)
	}
	return a
}
