package shell

import (
	"path"
	"strings"
)

// What the built-in classification forbids beyond whole programs:
// recursive removal or permission changes of the root, the home directory
// or a top-level system directory, and writes to raw disks and memory.

var rmSpec = spec("rm", "abbrev permute",
	"f|force", "i", "I", "interactive=?", "one-file-system", "no-preserve-root", "preserve-root=?", "r|R|recursive",
	"d|dir", "v|verbose", "help", "version")

var chmodSpec = spec("chmod", "abbrev permute",
	"c|changes", "f|silent|quiet", "v|verbose", "no-preserve-root", "preserve-root", "reference=", "R|recursive",
	"dereference", "h|no-dereference", "H", "L", "P", "help", "version", "from=")

// systemDirs are the top-level directories whose recursive removal or
// permission change breaks the machine.
var systemDirs = set("bin", "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "opt", "proc", "root",
	"run", "sbin", "srv", "sys", "usr", "var", "snap", "mnt", "media")

// rootLike reports whether a word as written names the root, the home
// directory, or a top-level system directory (with or without a trailing
// slash or /*).
func rootLike(w Word) bool {
	raw := w.Raw
	if raw == "" {
		raw = w.Value
	}
	r := strings.NewReplacer(`"`, "", `'`, "", "${HOME}", "$HOME").Replace(raw)
	r = strings.TrimSuffix(r, "*")
	for strings.HasSuffix(r, "/") && len(r) > 1 {
		r = strings.TrimSuffix(r, "/")
	}
	for strings.HasSuffix(r, "/.") {
		r = strings.TrimSuffix(r, "/.")
	}
	switch r {
	case "/", "~", "$HOME", "/.", "/..", "":
		return r != ""
	}
	if strings.HasPrefix(r, "/") {
		c := path.Clean(r)
		return c == "/" || systemDirs[strings.TrimPrefix(c, "/")]
	}
	return false
}

// ForbiddenArgs reports whether a command is forbidden by its arguments:
// rm -r, chmod -R, chown -R or chgrp -R of the root, the home directory or
// a top-level system directory (or rm --no-preserve-root at all).
func ForbiddenArgs(c *Command) (bool, string) {
	name := c.Name()
	if name == "" || c.Wrapper {
		return false, ""
	}
	base := path.Base(name)
	var s *optSpec
	recursive := "r"
	switch base {
	case "rm":
		s = rmSpec
	case "chmod", "chown", "chgrp":
		s, recursive = chmodSpec, "R"
	default:
		return false, ""
	}
	p := s.parse(c.Args[1:])
	if p.has("no-preserve-root") {
		return true, base + " --no-preserve-root removes the root directory"
	}
	if !p.has(recursive) {
		return false, ""
	}
	ops := p.operands
	if base != "rm" && len(ops) > 0 && !p.has("reference") {
		ops = ops[1:] // the mode or owner
	}
	for _, o := range ops {
		if rootLike(o) {
			return true, base + " -" + recursive + " " + o.Raw + " destroys the system or the home directory"
		}
	}
	return false, ""
}

// RawDevice reports whether p names a disk, a partition or memory, which
// no command may write.
func RawDevice(p string) bool {
	p = path.Clean(p)
	if !strings.HasPrefix(p, "/dev/") {
		return false
	}
	n := strings.TrimPrefix(p, "/dev/")
	for _, pre := range []string{"sd", "hd", "vd", "xvd", "nvme", "mmcblk", "loop", "dm-", "md", "nbd", "disk/", "mapper/"} {
		if strings.HasPrefix(n, pre) {
			return true
		}
	}
	switch n {
	case "mem", "kmem", "port", "kmsg":
		return true
	}
	return false
}
