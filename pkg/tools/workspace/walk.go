package workspace

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/toolgate/toolgate/pkg/tools/workspace/gitignore"
)

// WalkOptions say which files a walk yields.
type WalkOptions struct {
	// Hidden includes files and directories whose name starts with a dot
	// (.git is always skipped).
	Hidden bool
	// NoIgnore stops honouring .gitignore files.
	NoIgnore bool
	// SkipDir, when set, is asked about every directory below the top
	// (rel is relative to the top, slash-separated); true prunes it.
	SkipDir func(rel string) bool
}

// Entry is a regular file met by a walk.
type Entry struct {
	// Rel is the path relative to the top of the walk, slash-separated.
	Rel string
	// Name is the file's name in its directory.
	Name string
	// Dir is the directory holding the file, valid during the callback.
	Dir *os.Root
	// DirReal is the real path of the directory holding the file.
	DirReal string
	// Type is the file's type from the directory entry (always regular).
	Type  fs.FileMode
	entry fs.DirEntry
}

// Real returns the real path of the file (its directory's real path and
// its name: the walk never follows symlinks).
func (e *Entry) Real() string { return filepath.Join(e.DirReal, e.Name) }

// Info returns the file's lstat information.
func (e *Entry) Info() (fs.FileInfo, error) { return e.Dir.Lstat(e.Name) }

// Open opens the file for reading without following a symlink and without
// blocking, and refuses it unless it is (still) a regular file.
func (e *Entry) Open() (*os.File, fs.FileInfo, error) {
	f, err := e.Dir.OpenFile(e.Name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, &fs.PathError{Op: "open", Path: e.Rel, Err: ErrNotRegular}
	}
	return f, fi, nil
}

// Links returns the hard link count from fi.
func Links(fi fs.FileInfo) uint64 { return nlink(fi) }

// WalkTop describes where a walk starts.
type WalkTop struct {
	// Real is the real path of the top.
	Real string
	// Loc is where the name asked for was resolved.
	Loc Location
	// IsFile is true when the top is a single regular file.
	IsFile bool
}

// Walk calls fn for every regular file beneath name (or for name itself
// when it is a regular file), depth first in lexical order. Symlinks are
// not followed, and FIFOs, sockets and devices are never opened: types
// come from the directory entries. Hidden files and .gitignore'd ones
// (with the .gitignore files of the directories between the top of name's
// root and name) are left out unless opts say otherwise. Directories that
// cannot be read are skipped. fn returning fs.SkipAll stops the walk with
// no error; another error stops it with that error. The walk returns
// ctx.Err() when the context is cancelled.
func (w *Workspace) Walk(ctx context.Context, name string, opts WalkOptions, check Checker, fn func(*Entry) error) (WalkTop, error) {
	loc, err := w.Resolve(name)
	if err != nil {
		return WalkTop{}, err
	}
	fi, err := loc.root.r.Stat(loc.Rel)
	if err != nil {
		return WalkTop{Loc: loc}, classify("stat", name, err)
	}
	if fi.Mode().IsRegular() {
		dirRel, base := filepath.Dir(loc.Rel), filepath.Base(loc.Rel)
		d, err := w.openDir(name, Location{Root: loc.Root, Rel: dirRel, root: loc.root}, nil)
		if err != nil {
			return WalkTop{Loc: loc}, err
		}
		defer d.Close()
		top := WalkTop{Real: filepath.Join(d.Real, base), Loc: loc, IsFile: true}
		if check != nil {
			if err := check(top.Real); err != nil {
				return top, &fs.PathError{Op: "open", Path: name, Err: err}
			}
		}
		err = fn(&Entry{Rel: filepath.ToSlash(base), Name: base, Dir: d.Root, DirReal: d.Real, Type: 0})
		if errors.Is(err, fs.SkipAll) {
			err = nil
		}
		return top, err
	}
	if !fi.IsDir() {
		return WalkTop{Loc: loc}, &fs.PathError{Op: "walk", Path: name, Err: ErrNotRegular}
	}
	d, err := w.openDir(name, loc, check)
	if err != nil {
		return WalkTop{Loc: loc}, err
	}
	defer d.Close()
	top := WalkTop{Real: d.Real, Loc: loc}
	var stack *gitignore.Stack
	if !opts.NoIgnore {
		stack = w.ancestorIgnores(loc)
	}
	wk := &walker{ctx: ctx, opts: opts, fn: fn}
	if loc.Rel != "." {
		wk.base = filepath.ToSlash(loc.Rel) + "/"
	}
	err = wk.dir(d.Root, d.Real, "", stack)
	if errors.Is(err, fs.SkipAll) {
		err = nil
	}
	return top, err
}

// ancestorIgnores loads the .gitignore files of the directories from the
// top of loc's root down to loc's parent; stack paths are relative to the
// root.
func (w *Workspace) ancestorIgnores(loc Location) *gitignore.Stack {
	if loc.Rel == "." {
		return nil
	}
	parts := strings.Split(filepath.ToSlash(loc.Rel), "/")
	var stack *gitignore.Stack
	for i := 0; i < len(parts); i++ {
		dir := strings.Join(parts[:i], "/")
		stack = stack.Push(dir, readIgnore(loc.root.r, path.Join(dir, ".gitignore")))
	}
	return stack
}

func readIgnore(r *os.Root, name string) *gitignore.Matcher {
	f, err := r.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > 1<<20 {
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil
	}
	m := gitignore.Parse(data)
	if m.Len() == 0 {
		return nil
	}
	return m
}

type walker struct {
	base string // the top relative to its root, with a trailing slash
	ctx  context.Context
	opts WalkOptions
	fn   func(*Entry) error
}

func (wk *walker) dir(d *os.Root, real, rel string, stack *gitignore.Stack) error {
	if err := wk.ctx.Err(); err != nil {
		return err
	}
	f, err := d.Open(".")
	if err != nil {
		return nil // unreadable: skip
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil && len(entries) == 0 {
		return nil
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	if !wk.opts.NoIgnore {
		for _, e := range entries {
			if e.Name() == ".gitignore" && e.Type().IsRegular() {
				stack = stack.Push(strings.TrimSuffix(wk.base+rel, "/"), readIgnore(d, ".gitignore"))
				break
			}
		}
	}
	for _, e := range entries {
		name := e.Name()
		t := e.Type()
		if name == ".git" && t.IsDir() {
			continue
		}
		if !wk.opts.Hidden && strings.HasPrefix(name, ".") {
			continue
		}
		r := name
		if rel != "" {
			r = rel + "/" + name
		}
		switch {
		case t.IsDir():
			if stack.Ignored(wk.base+r, true) {
				continue
			}
			if wk.opts.SkipDir != nil && wk.opts.SkipDir(r) {
				continue
			}
			sub, err := d.OpenRoot(name)
			if err != nil {
				continue
			}
			err = wk.dir(sub, filepath.Join(real, name), r, stack)
			sub.Close()
			if err != nil {
				return err
			}
		case t.IsRegular():
			if stack.Ignored(wk.base+r, false) {
				continue
			}
			if err := wk.fn(&Entry{Rel: r, Name: name, Dir: d, DirReal: real, Type: t, entry: e}); err != nil {
				return err
			}
		default:
			// Symlinks are not followed; FIFOs, sockets and devices are
			// never opened.
		}
	}
	return nil
}
