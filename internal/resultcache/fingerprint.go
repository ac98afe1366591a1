package resultcache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/workspace"
)

// A fingerprint is a digest of what a call reads, taken now. It is part
// of the cache key, so an entry is served only to a call that finds the
// same content; it is taken again after the tool ran, and the output
// stored only when nothing changed meanwhile.
//
// What each fingerprint validates:
//
//   - read: the file's real path, device, inode, size, mtime and ctime,
//     and the SHA-256 of its whole content (read through the workspace,
//     with the call's path check, as the tool reads it).
//   - ls: the directory's real path (judged by the call's path rules) and,
//     for each entry, its name, type, mode, inode, size, mtime and ctime
//     (lstat, and stat for symlinks).
//   - grep, glob: for every regular file under the searched path (hidden
//     and ignored ones included, a superset of what the tool reads), its
//     path, inode, mode, size, mtime and ctime, and whether the call's path
//     rules let it read the file. File contents are not
//     hashed: a change that keeps all of these is not seen. The kernel
//     sets ctime on every write and no system call sets it back, so such
//     a change needs the clock moved or the raw device written.

// errUncacheable says a call's reads cannot be fingerprinted: it runs
// uncached.
var errUncacheable = errors.New("not cacheable")

// fingerprinter digests what call c of one tool reads.
type fingerprinter func(ctx context.Context, ws *workspace.Workspace, c *tools.Call) (string, error)

// fingerprinters are the cacheable tools: the built-in read-only ones.
var fingerprinters = map[string]fingerprinter{
	"read": readPrint,
	"ls":   lsPrint,
	"grep": treePrint,
	"glob": globPrint,
}

// Bounds of fingerprinting: past them a call runs uncached.
const (
	maxHashBytes  = 32 << 20 // read: the largest file hashed
	maxTreeFiles  = 50000    // grep, glob: the most files stat'ed
	maxListedDirs = 10000    // ls: the most entries stat'ed
)

func statLine(h hash.Hash, name string, fi fs.FileInfo) {
	fmt.Fprintf(h, "%q %s %d %d", name, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
	h.Write([]byte(statIdentity(fi)))
	h.Write([]byte{'\n'})
}

func readPrint(ctx context.Context, ws *workspace.Workspace, c *tools.Call) (string, error) {
	name := tools.ArgString(c.Args, "path")
	if name == "" {
		return "", errUncacheable
	}
	f, err := ws.Open(name, c.CheckPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if f.Info.Size() > maxHashBytes {
		return "", errUncacheable
	}
	h := sha256.New()
	statLine(h, f.Real, f.Info)
	n, err := io.Copy(h, io.LimitReader(f, maxHashBytes+1))
	if err != nil {
		return "", err
	}
	if n > maxHashBytes {
		return "", errUncacheable
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func lsPrint(ctx context.Context, ws *workspace.Workspace, c *tools.Call) (string, error) {
	name := tools.ArgString(c.Args, "path")
	if name == "" {
		name = "."
	}
	d, err := ws.OpenDir(name, c.CheckPath)
	if err != nil {
		return "", err
	}
	defer d.Close()
	des, err := d.ReadDir()
	if err != nil {
		return "", err
	}
	if len(des) > maxListedDirs {
		return "", errUncacheable
	}
	sort.Slice(des, func(i, j int) bool { return des[i].Name() < des[j].Name() })
	h := sha256.New()
	if fi, err := d.Stat("."); err == nil {
		statLine(h, d.Real, fi)
	}
	for _, de := range des {
		fi, err := d.Lstat(de.Name())
		if err != nil {
			fmt.Fprintf(h, "%q gone\n", de.Name())
			continue
		}
		statLine(h, de.Name(), fi)
		if fi.Mode()&fs.ModeSymlink != 0 {
			if ti, err := d.Stat(de.Name()); err == nil {
				statLine(h, "-> "+de.Name(), ti)
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func globPrint(ctx context.Context, ws *workspace.Workspace, c *tools.Call) (string, error) {
	// A pattern reaching outside the searched path is read from where
	// the walk below does not go.
	p := filepath.ToSlash(tools.ArgString(c.Args, "pattern"))
	if path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") || strings.Contains(p, "/../") {
		return "", errUncacheable
	}
	return treePrint(ctx, ws, c)
}

func treePrint(ctx context.Context, ws *workspace.Workspace, c *tools.Call) (string, error) {
	name := tools.ArgString(c.Args, "path")
	if name == "" {
		name = "."
	}
	h := sha256.New()
	files := 0
	top, err := ws.Walk(ctx, name, workspace.WalkOptions{Hidden: true, NoIgnore: true}, c.CheckPath, func(e *workspace.Entry) error {
		if files++; files > maxTreeFiles {
			return errUncacheable
		}
		fi, err := e.Info()
		if err != nil {
			fmt.Fprintf(h, "%q gone\n", e.Rel)
			return nil
		}
		statLine(h, e.Rel, fi)
		if c.CheckPath != nil && c.CheckPath(e.Real()) != nil {
			// What the path rules let the call see is part of what it
			// reads: a rule that changes for this file changes the print.
			fmt.Fprintf(h, "%q refused\n", e.Rel)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	fmt.Fprintf(h, "top %q %v\n", top.Real, top.IsFile)
	return hex.EncodeToString(h.Sum(nil)), nil
}
