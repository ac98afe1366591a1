package bash

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// A call's grant is what the gate judged it may touch in the workspace
// (policy.Access), as bwrap mounts applied over the workspace's bind:
//
//   - writes: a call judged to write nothing sees the workspace
//     read-only; one judged to write named files sees it read-only but
//     for those files, each bound writable by itself (a file that does
//     not exist yet is created empty first, as the redirection would,
//     so that the call may write exactly it and no other name beside
//     it); a call running a program whose writes the
//     gate cannot name (cp, make, git commit), an approved call and a
//     call no gate judged get the workspace writable;
//   - protected files (the repository's config and hooks, attributes,
//     .gitmodules, .npmrc, ...) are bound read-only over themselves for
//     every call no person approved, now or by an amendment (writing
//     one always asks), and every directory between them and the workspace is
//     bound over itself, so that a call cannot rename the directory away
//     and put its own in its place (a mount point cannot be renamed);
//   - masked files, those the policy denies reading, are bound over by
//     /dev/null (a directory by an empty read-only tmpfs): the call reads
//     nothing of them, by any name.
//
// The mounts are ordered outermost first: bwrap takes each source from
// the host, so a later mount of a directory would cover those inside it.

// grant is a call's mounts over the workspace and how much of it the
// call may write.
type grant struct {
	mounts []string
	write  policy.WriteScope
}

// errWouldCreate says a grant would create a file the call was judged to
// write, for a sandbox prepared ahead of its call, which creates none.
var errWouldCreate = errors.New("a file the call may write is missing")

// grantFor builds c's grant over the workspace ws, for commands running
// as id. A workspace too large to scan fails the call (fail closed).
// create: a missing file the call was judged to write is created (for
// the call itself); else its absence is errWouldCreate.
func grantFor(c *tools.Call, ws string, id identity, create bool) (*grant, error) {
	var a *policy.Access
	if c.Decision != nil {
		a = c.Decision.Access
	}
	scan, err := a.Scan(ws)
	if err != nil {
		return nil, fmt.Errorf("bash: find the workspace's protected and denied files: %w", err)
	}
	// A person's approval, now or standing (an amendment), is of the
	// command as written: the workspace writable, protected files too.
	approved := c.Approved || (c.Decision != nil && (c.Decision.Action != policy.Allow || c.Decision.Amended()))
	g := &grant{write: policy.WriteWorkspace}
	if a != nil && !approved {
		g.write = a.Write
	}
	type mount struct {
		path  string
		order int // at one path: writable, then protected, then masked
		args  []string
	}
	var ms []mount
	if g.write != policy.WriteWorkspace {
		g.mounts = append(g.mounts, "--remount-ro", ws)
	}
	if g.write == policy.WriteNamed {
		for _, f := range a.WriteFiles {
			ok, err := writable(f, ws, id, create)
			if err != nil {
				return nil, err
			}
			if ok {
				ms = append(ms, mount{f, 0, []string{"--bind", f, f}})
			}
		}
	}
	bindMode := "--ro-bind"
	if g.write == policy.WriteWorkspace {
		bindMode = "--bind"
	}
	held := map[string]bool{}
	if approved {
		// Writing a protected file always asks: what a person approved
		// may change one.
		scan.Protected = nil
	}
	for _, p := range scan.Protected {
		for _, d := range parentsUnder(p, ws) {
			if !held[d] {
				held[d] = true
				ms = append(ms, mount{d, 0, []string{bindMode, d, d}})
			}
		}
		ms = append(ms, mount{p, 1, []string{"--ro-bind", p, p}})
	}
	for _, p := range scan.Masked {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.IsDir():
			ms = append(ms, mount{p, 2, []string{"--perms", "0000", "--tmpfs", p, "--remount-ro", p}})
		default:
			ms = append(ms, mount{p, 2, []string{"--ro-bind", "/dev/null", p}})
		}
	}
	slices.SortStableFunc(ms, func(x, y mount) int {
		if dx, dy := strings.Count(x.path, "/"), strings.Count(y.path, "/"); dx != dy {
			return dx - dy
		}
		return x.order - y.order
	})
	for _, m := range ms {
		g.mounts = append(g.mounts, m.args...)
	}
	return g, nil
}

// writable prepares f, a file the call was judged to write, to be bound
// writable: an existing regular file as it is; a missing one, whose
// directory exists in the workspace, created empty and owned by the
// user commands run as, unless !create (errWouldCreate). Anything else
// is left read-only (false): the write fails as it would on a read-only
// file system.
func writable(f, ws string, id identity, create bool) (bool, error) {
	if _, in := within(ws, f); !in || f == ws {
		return false, nil
	}
	fi, err := os.Lstat(f)
	if err == nil {
		return fi.Mode().IsRegular(), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if di, err := os.Lstat(filepath.Dir(f)); err != nil || !di.IsDir() {
		return false, nil
	}
	if !create {
		return false, fmt.Errorf("%w: %s", errWouldCreate, f)
	}
	fd, err := syscall.Open(f, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o644)
	if errors.Is(err, syscall.EEXIST) {
		// Another call made it meanwhile (two calls appending to one
		// new file): bound as it is, when a regular file.
		fi, err := os.Lstat(f)
		return err == nil && fi.Mode().IsRegular(), nil
	}
	if err != nil {
		return false, nil // not ours to create: left read-only
	}
	defer syscall.Close(fd)
	if id.drop {
		if err := syscall.Fchown(fd, int(id.uid), int(id.gid)); err != nil {
			_ = os.Remove(f)
			return false, fmt.Errorf("bash: give %s to the command's user: %w", f, err)
		}
	}
	return true, nil
}
