// Package workspace confines file access to a set of allowed roots: the
// workspace first, plus extra directories the deployment grants. Every
// access goes through an os.Root opened on a root, so `..`, absolute paths
// outside the roots and symlinks pointing out are refused whatever their
// shape, on the file actually opened rather than on the string asked for.
// Only regular files are read or written: FIFOs, devices and sockets are
// refused without blocking, and directory walks never open them.
package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unicode/utf8"
)

// Sentinel errors, wrapped (inside an *fs.PathError carrying the path) by
// every refusal of this package; test them with errors.Is.
var (
	// ErrOutside: the path, or a symlink on the way, leads outside every
	// allowed root.
	ErrOutside = errors.New("outside the allowed roots")
	// ErrNotRegular: the file is a FIFO, device, socket or other
	// non-regular file.
	ErrNotRegular = errors.New("not a regular file")
	// ErrIsDir: a file operation named a directory.
	ErrIsDir = errors.New("is a directory")
	// ErrNotDir: a directory operation named something else.
	ErrNotDir = errors.New("not a directory")
	// ErrHardLink: a path policy is in force and the file has more than
	// one hard link, so its other names cannot be judged.
	ErrHardLink = errors.New("file has several hard links")
	// ErrInvalidPath: the path is empty or holds a NUL byte.
	ErrInvalidPath = errors.New("invalid path")
)

// Checker judges the real path of a file about to be read or written; a
// non-nil error refuses the access and is wrapped into the returned error.
// tools.Call.CheckPath has this type.
type Checker func(realPath string) error

// Workspace is a set of allowed roots, the first being the workspace that
// relative paths are resolved against. It is safe for concurrent use.
type Workspace struct {
	roots []*root
}

type root struct {
	dir   string // absolute, as configured (cleaned)
	real  string // dir with symlinks resolved
	r     *os.Root
	dirfd *os.File // the directory, for openFast; nil where there is none
}

// Open opens the workspace dir and the extra allowed roots. Each must be an
// existing directory; duplicates are dropped.
func Open(dir string, extra ...string) (*Workspace, error) {
	w := &Workspace{}
	seen := map[string]bool{}
	for i, d := range append([]string{dir}, extra...) {
		if d == "" {
			w.Close()
			if i == 0 {
				return nil, fmt.Errorf("workspace: %w: empty workspace directory", ErrInvalidPath)
			}
			return nil, fmt.Errorf("workspace: %w: empty root", ErrInvalidPath)
		}
		abs, err := filepath.Abs(d)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("workspace: root %s: %w", d, err)
		}
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("workspace: root %s: %w", d, err)
		}
		if seen[real] {
			continue
		}
		seen[real] = true
		r, err := os.OpenRoot(real)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("workspace: root %s: %w", d, err)
		}
		w.roots = append(w.roots, &root{dir: abs, real: real, r: r, dirfd: openDirFD(real)})
	}
	initEscapeErr(w.roots[0].r)
	return w, nil
}

// Close releases the roots.
func (w *Workspace) Close() error {
	var errs []error
	for _, r := range w.roots {
		errs = append(errs, r.r.Close())
		if r.dirfd != nil {
			errs = append(errs, r.dirfd.Close())
		}
	}
	return errors.Join(errs...)
}

// Dir returns the workspace directory (absolute, symlinks resolved).
func (w *Workspace) Dir() string { return w.roots[0].real }

// Roots returns every allowed root (absolute, symlinks resolved), the
// workspace first.
func (w *Workspace) Roots() []string {
	out := make([]string, len(w.roots))
	for i, r := range w.roots {
		out[i] = r.real
	}
	return out
}

// Location is a path resolved to one root: the file is Rel beneath Root.
type Location struct {
	// Root is the root's directory (absolute, symlinks resolved).
	Root string
	// Rel is the path beneath Root, cleaned and local ("." for the root).
	Rel  string
	root *root
}

// Abs returns the lexical absolute path of the location (symlinks inside
// the root are not resolved).
func (l Location) Abs() string { return filepath.Join(l.Root, l.Rel) }

// Resolve maps name to a root. Relative names are taken from the
// workspace; absolute names (and ~ or ~/... for the home directory) must
// lie inside one of the roots; ~name is an ordinary relative name. It is lexical: symlinks are judged when the file is
// opened. The error wraps ErrOutside or ErrInvalidPath.
func (w *Workspace) Resolve(name string) (Location, error) {
	switch {
	case name == "":
		return Location{}, &fs.PathError{Op: "resolve", Path: name, Err: fmt.Errorf("%w: empty path", ErrInvalidPath)}
	case strings.IndexByte(name, 0) >= 0:
		return Location{}, &fs.PathError{Op: "resolve", Path: name, Err: fmt.Errorf("%w: NUL byte in path", ErrInvalidPath)}
	}
	p := name
	if p == "~" || strings.HasPrefix(p, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return Location{}, &fs.PathError{Op: "resolve", Path: name, Err: fmt.Errorf("%w: no home directory: %v", ErrOutside, err)}
		}
		p = filepath.Join(home, p[1:])
	}
	if !filepath.IsAbs(p) {
		c := filepath.Clean(p)
		if !filepath.IsLocal(c) {
			return Location{}, &fs.PathError{Op: "resolve", Path: name, Err: fmt.Errorf("%w: the path climbs out of the workspace %s", ErrOutside, w.roots[0].real)}
		}
		return Location{Root: w.roots[0].real, Rel: c, root: w.roots[0]}, nil
	}
	c := filepath.Clean(p)
	var best *root
	var bestRel string
	bestLen := -1
	for _, r := range w.roots {
		for _, base := range []string{r.real, r.dir} {
			rel, ok := within(base, c)
			if ok && len(base) > bestLen {
				best, bestRel, bestLen = r, rel, len(base)
			}
		}
	}
	if best == nil {
		return Location{}, &fs.PathError{Op: "resolve", Path: name, Err: fmt.Errorf("%w: allowed roots are %s", ErrOutside, strings.Join(w.Roots(), ", "))}
	}
	return Location{Root: best.real, Rel: bestRel, root: best}, nil
}

// within reports whether the clean absolute path p is base or beneath it,
// and the path relative to base.
func within(base, p string) (string, bool) {
	if p == base {
		return ".", true
	}
	prefix := base
	if !strings.HasSuffix(prefix, string(filepath.Separator)) {
		prefix += string(filepath.Separator)
	}
	if !strings.HasPrefix(p, prefix) {
		return "", false
	}
	return p[len(prefix):], true
}

// Display returns how a real path should be shown: relative to the
// workspace when inside it, absolute otherwise, escaped by QuoteName.
func (w *Workspace) Display(realPath string) string {
	if rel, ok := within(w.roots[0].real, realPath); ok {
		return QuoteName(rel)
	}
	return QuoteName(realPath)
}

// QuoteName is how every tool prints a file name or path, so that a name
// cannot fake lines or terminal effects in output a model reads. A name
// of valid UTF-8 whose every character is printable (strconv.IsPrint: no
// control characters such as newline, carriage return, tab, escape or
// DEL, no invisible format characters such as bidi overrides), which
// neither starts with a double quote nor starts or ends with a space, is
// printed as it is. Any other name is printed Go-quoted (strconv.Quote:
// "a\nb", "\x1b[31m", "\u202e"), which always starts with a double
// quote and can be undone with strconv.Unquote.
func QuoteName(name string) string {
	if name == "" || name[0] == '"' || name[0] == ' ' || name[len(name)-1] == ' ' || !utf8.ValidString(name) {
		return strconv.Quote(name)
	}
	for _, r := range name {
		if !strconv.IsPrint(r) {
			return strconv.Quote(name)
		}
	}
	return name
}

// escapeErr is the error os.Root reports for a path that escapes it; it is
// not exported by package os, so it is captured once from a real refusal.
var (
	escapeOnce sync.Once
	escapeErr  error
)

func initEscapeErr(r *os.Root) {
	escapeOnce.Do(func() {
		_, err := r.Open("..")
		var pe *fs.PathError
		if errors.As(err, &pe) {
			escapeErr = pe.Err
		}
	})
}

// classify wraps an error from os.Root into a PathError for name whose
// cause says what happened, wrapping ErrOutside for escapes.
func classify(op, name string, err error) error {
	var pe *fs.PathError
	cause := err
	if errors.As(err, &pe) {
		cause = pe.Err
	}
	switch {
	case escapeErr != nil && errors.Is(cause, escapeErr):
		cause = fmt.Errorf("%w: a symlink or .. on the way leads out of its root", ErrOutside)
	case errors.Is(cause, syscall.ENXIO):
		// What open(2) says of a socket, or of a device without a driver.
		cause = fmt.Errorf("%w (socket or device: %v)", ErrNotRegular, cause)
	}
	return &fs.PathError{Op: op, Path: name, Err: cause}
}
