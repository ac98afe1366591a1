package workspace

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// File is a regular file opened inside a root, with what was learnt about
// it when it was opened.
type File struct {
	*os.File
	// Info is the fstat of the opened file.
	Info fs.FileInfo
	// Real is the real path of the opened file (from /proc/self/fd).
	Real string
	// Loc is where the name asked for was resolved.
	Loc Location
}

// Links returns the file's hard link count.
func (f *File) Links() uint64 { return nlink(f.Info) }

func nlink(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

// Open opens name for reading. It refuses, with an *fs.PathError naming
// name, anything outside the roots (ErrOutside), directories (ErrIsDir)
// and every non-regular file (ErrNotRegular) without blocking on it: the
// file is opened non-blocking and its type checked with fstat before any
// read. When check is non-nil it judges the file's real path, and a file
// with more than one hard link is refused (ErrHardLink), since its other
// names cannot be judged.
func (w *Workspace) Open(name string, check Checker) (*File, error) {
	loc, err := w.Resolve(name)
	if err != nil {
		return nil, err
	}
	const flags = os.O_RDONLY | syscall.O_NONBLOCK | syscall.O_NOCTTY
	f, real, ok := openFast(loc.root, loc.Rel, flags)
	if !ok {
		if f, err = loc.root.r.OpenFile(loc.Rel, flags, 0); err != nil {
			return nil, classify("open", name, err)
		}
	}
	wf, err := w.inspect(f, name, loc, real, check)
	if err != nil {
		f.Close()
		return nil, err
	}
	return wf, nil
}

// inspect checks the file f opened for name at loc. real is its real path
// when the open already knows it (openFast), else "" and it is read back
// from /proc.
func (w *Workspace) inspect(f *os.File, name string, loc Location, real string, check Checker) (*File, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	switch {
	case fi.IsDir():
		return nil, &fs.PathError{Op: "open", Path: name, Err: ErrIsDir}
	case !fi.Mode().IsRegular():
		return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w (%s)", ErrNotRegular, typeName(fi.Mode()))}
	}
	if real == "" {
		real, err = realPath(f)
	}
	if err != nil {
		if check != nil {
			// Without the real path there is nothing to judge: refuse.
			return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("cannot learn the real path: %w", err)}
		}
		real = loc.Abs()
	}
	if _, ok := w.rootOf(real); !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w: the file opened is %s", ErrOutside, real)}
	}
	if check != nil {
		if err := check(real); err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		if n := nlink(fi); n > 1 {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w: %d links; its other names cannot be checked against the path policy", ErrHardLink, n)}
		}
	}
	return &File{File: f, Info: fi, Real: real, Loc: loc}, nil
}

func (w *Workspace) rootOf(real string) (*root, bool) {
	for _, r := range w.roots {
		if _, ok := within(r.real, real); ok {
			return r, true
		}
	}
	return nil, false
}

// ReadFile reads the regular file name whole, refusing it (with
// ErrTooLarge) when it is larger than max bytes (no limit when max <= 0)
// before reading anything. See Open for the other refusals.
func (w *Workspace) ReadFile(name string, max int64, check Checker) ([]byte, *File, error) {
	f, err := w.Open(name, check)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	size := f.Info.Size()
	if max > 0 && size > max {
		return nil, f, &fs.PathError{Op: "read", Path: name, Err: &TooLargeError{Size: size, Max: max}}
	}
	limit := size + 1
	if max > 0 {
		limit = max + 1
	}
	buf := make([]byte, 0, size+512)
	data, err := readAllLimit(f, buf, limit)
	if err != nil {
		return nil, f, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	if max > 0 && int64(len(data)) > max {
		// The file grew while being read.
		return nil, f, &fs.PathError{Op: "read", Path: name, Err: &TooLargeError{Size: int64(len(data)), Max: max}}
	}
	return data, f, nil
}

func readAllLimit(r io.Reader, buf []byte, limit int64) ([]byte, error) {
	lr := io.LimitReader(r, limit)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// ErrTooLarge is wrapped by TooLargeError.
var ErrTooLarge = errors.New("file too large")

// TooLargeError says a file is above the size allowed for it.
type TooLargeError struct {
	Size, Max int64
}

// Error says what is wrong, for a person.
func (e *TooLargeError) Error() string {
	return fmt.Sprintf("file too large: %d bytes, the limit is %d bytes", e.Size, e.Max)
}

// Unwrap makes errors.Is(err, ErrTooLarge) true.
func (e *TooLargeError) Unwrap() error { return ErrTooLarge }

// Stat returns the file info of name, following symlinks inside its root.
func (w *Workspace) Stat(name string) (fs.FileInfo, Location, error) {
	loc, err := w.Resolve(name)
	if err != nil {
		return nil, loc, err
	}
	fi, err := loc.root.r.Stat(loc.Rel)
	if err != nil {
		return nil, loc, classify("stat", name, err)
	}
	return fi, loc, nil
}

// Dir is a directory opened inside a root, as an os.Root of its own so
// that its entries are reached with one openat or fstatat each.
type Dir struct {
	*os.Root
	// Real is the directory's real path.
	Real string
	// Loc is where the name asked for was resolved.
	Loc Location
}

// OpenDir opens the directory name. A non-directory is refused with
// ErrNotDir, without blocking. When check is non-nil it judges the
// directory's real path.
func (w *Workspace) OpenDir(name string, check Checker) (*Dir, error) {
	loc, err := w.Resolve(name)
	if err != nil {
		return nil, err
	}
	return w.openDir(name, loc, check)
}

func (w *Workspace) openDir(name string, loc Location, check Checker) (*Dir, error) {
	f, err := loc.root.r.OpenFile(loc.Rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_DIRECTORY|syscall.O_NOCTTY, 0)
	if err != nil {
		if pe, ok := err.(*fs.PathError); ok && pe.Err == syscall.ENOTDIR {
			return nil, &fs.PathError{Op: "open", Path: name, Err: ErrNotDir}
		}
		return nil, classify("open", name, err)
	}
	real, rerr := realPath(f)
	f.Close()
	if rerr != nil {
		if check != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("cannot learn the real path: %w", rerr)}
		}
		real = loc.Abs()
	}
	if _, ok := w.rootOf(real); !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w: the directory opened is %s", ErrOutside, real)}
	}
	if check != nil {
		if err := check(real); err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
	}
	r, err := loc.root.r.OpenRoot(loc.Rel)
	if err != nil {
		return nil, classify("open", name, err)
	}
	return &Dir{Root: r, Real: real, Loc: loc}, nil
}

// ReadDir returns the directory's entries in directory order, with types
// from the directory itself (nothing is opened).
func (d *Dir) ReadDir() ([]fs.DirEntry, error) {
	f, err := d.Root.Open(".")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}

// WriteResult describes a completed write.
type WriteResult struct {
	// Real is the real path written.
	Real string
	// Created is true when the file did not exist.
	Created bool
	// Bytes is the number of bytes written.
	Bytes int
	// Mode is the permission of the file written.
	Mode fs.FileMode
}

// WriteFile replaces (or creates) the regular file name with data
// atomically: it writes a temporary file in the same directory, syncs it
// and renames it over the target, so readers see the old or the new
// content and never a mix. Missing parent directories are created. An
// existing file keeps its mode; a new one gets perm. When the worker runs
// as root, an existing file also keeps its owner and group, and a new file
// or directory gets those of the directory it is created in. A symlink inside the
// root is followed and its target replaced. When check is non-nil it
// judges the real path of the file before anything is written.
func (w *Workspace) WriteFile(name string, data []byte, perm fs.FileMode, check Checker) (WriteResult, error) {
	loc, err := w.Resolve(name)
	if err != nil {
		return WriteResult{}, err
	}
	if loc.Rel == "." {
		return WriteResult{}, &fs.PathError{Op: "write", Path: name, Err: ErrIsDir}
	}
	res := WriteResult{Mode: perm}
	target := loc
	owner := -1 // uid and gid the file keeps; -1: the directory's
	var group int
	// An existing target: learn its mode and real path through an open,
	// which follows symlinks only within the root and never blocks.
	if f, err := loc.root.r.OpenFile(loc.Rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0); err == nil {
		fi, serr := f.Stat()
		real, rerr := realPath(f)
		f.Close()
		switch {
		case serr != nil:
			return res, &fs.PathError{Op: "stat", Path: name, Err: serr}
		case fi.IsDir():
			return res, &fs.PathError{Op: "write", Path: name, Err: ErrIsDir}
		case !fi.Mode().IsRegular():
			return res, &fs.PathError{Op: "write", Path: name, Err: fmt.Errorf("%w (%s)", ErrNotRegular, typeName(fi.Mode()))}
		case rerr != nil:
			return res, &fs.PathError{Op: "write", Path: name, Err: fmt.Errorf("cannot learn the real path: %w", rerr)}
		}
		rel, ok := within(loc.root.real, real)
		if !ok {
			return res, &fs.PathError{Op: "write", Path: name, Err: fmt.Errorf("%w: the file is %s", ErrOutside, real)}
		}
		target = Location{Root: loc.root.real, Rel: rel, root: loc.root}
		res.Mode = fi.Mode().Perm()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			owner, group = int(st.Uid), int(st.Gid)
		}
	} else if !isNotExist(err) {
		return res, classify("open", name, err)
	} else {
		res.Created = true
	}
	dir, base := filepath.Dir(target.Rel), filepath.Base(target.Rel)
	if dir != "." {
		created := missingDirs(target.root.r, dir)
		if err := target.root.r.MkdirAll(dir, 0o755); err != nil {
			return res, classify("mkdir", name, err)
		}
		giveToParentOwner(target.root.r, created)
	}
	d, err := w.openDir(name, Location{Root: target.Root, Rel: dir, root: target.root}, nil)
	if err != nil {
		return res, err
	}
	defer d.Close()
	res.Real = filepath.Join(d.Real, base)
	if check != nil {
		if err := check(res.Real); err != nil {
			return res, &fs.PathError{Op: "write", Path: name, Err: err}
		}
	}
	tmp := "." + base + ".tmp-" + randomSuffix()
	f, err := d.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return res, classify("create", name, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			d.Remove(tmp)
		}
	}()
	n, err := f.Write(data)
	res.Bytes = n
	if err != nil {
		return res, &fs.PathError{Op: "write", Path: name, Err: err}
	}
	if os.Geteuid() == 0 {
		// A root worker keeps a replaced file's owner, and gives a new
		// one to its directory's owner, as the workspace's user would
		// have written it.
		if owner < 0 {
			if fi, err := target.root.r.Stat(dir); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					owner, group = int(st.Uid), int(st.Gid)
				}
			}
		}
		if owner >= 0 {
			if err := f.Chown(owner, group); err != nil {
				return res, &fs.PathError{Op: "chown", Path: name, Err: err}
			}
		}
	}
	if err := f.Chmod(res.Mode); err != nil {
		return res, &fs.PathError{Op: "chmod", Path: name, Err: err}
	}
	if err := f.Sync(); err != nil {
		return res, &fs.PathError{Op: "sync", Path: name, Err: err}
	}
	if err := f.Close(); err != nil {
		return res, &fs.PathError{Op: "close", Path: name, Err: err}
	}
	if err := d.Rename(tmp, base); err != nil {
		d.Remove(tmp)
		ok = true
		return res, classify("rename", name, err)
	}
	ok = true
	return res, nil
}

// missingDirs lists the directories of dir (relative to r) that do not
// exist yet, outermost first.
func missingDirs(r *os.Root, dir string) []string {
	var out []string
	for d := dir; d != "." && d != "/" && d != ""; d = filepath.Dir(d) {
		if _, err := r.Lstat(d); err == nil {
			break
		}
		out = append([]string{d}, out...)
	}
	return out
}

// giveToParentOwner gives the directories a root worker just created to
// the owner of the directory they were created in.
func giveToParentOwner(r *os.Root, created []string) {
	if os.Geteuid() != 0 || len(created) == 0 {
		return
	}
	fi, err := r.Stat(filepath.Dir(created[0]))
	if err != nil {
		return
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return
	}
	for _, d := range created {
		_ = r.Lchown(d, int(st.Uid), int(st.Gid))
	}
}

func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist)
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// realPath returns the path the kernel has for the open file, read from
// /proc/self/fd without changing the file's blocking mode.
func realPath(f *os.File) (string, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return "", err
	}
	var p string
	var rerr error
	if err := rc.Control(func(fd uintptr) {
		p, rerr = os.Readlink("/proc/self/fd/" + strconv.FormatUint(uint64(fd), 10))
	}); err != nil {
		return "", err
	}
	if rerr != nil {
		return "", rerr
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("unexpected fd link %q", p)
	}
	return p, nil
}

func typeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "regular file"
	default:
		return "irregular file"
	}
}

// TypeName names the type of a file mode for people: "regular file",
// "directory", "named pipe", "socket", "character device", ...
func TypeName(m fs.FileMode) string { return typeName(m) }
