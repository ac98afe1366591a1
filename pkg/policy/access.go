package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/pkg/policy/shell"
)

// Access is what the gate judged a shell command may touch, for a sandbox
// that grants the call exactly that and nothing else: a misprediction of
// the gate then meets the kernel's refusal. It is set on every decision
// of a shell tool that is not a deny; a person approving an ask approves
// the command with this access.
type Access struct {
	// Reads are the real directories outside the workspace the command
	// may read: the policy's allowed roots for shell commands, and the
	// paths outside them the call named (an ask a person may approve).
	Reads []string
	// Write is how much of the workspace the command may write.
	Write WriteScope
	// WriteFiles, for WriteNamed, are the real paths inside the
	// workspace the command was judged to write (redirections and the
	// write arguments of programs that otherwise only read).
	WriteFiles []string
	// WorkspaceExec reports that the policy lets programs from the
	// workspace run (exec.security: full): the workspace is not noexec
	// for the call, and its audit says so.
	WorkspaceExec bool

	// denied judges a real path against the read rules' denied globs;
	// wsSegs is the folded workspace the globs match against.
	denied func(real string) bool
}

// WriteScope is how much of the workspace a shell command may write.
type WriteScope int

// The write scopes, narrowest first.
const (
	// WriteNone: every program of the command only reads, and it
	// redirects into no file.
	WriteNone WriteScope = iota
	// WriteNamed: the command writes only Access.WriteFiles.
	WriteNamed
	// WriteWorkspace: a program of the command may write what the gate
	// cannot name (cp, make, git commit, ...): the whole workspace.
	WriteWorkspace
)

// String names the scope as audits and logs show it.
func (w WriteScope) String() string {
	switch w {
	case WriteNone:
		return "none"
	case WriteNamed:
		return "named"
	}
	return "workspace"
}

// ErrScanBound is returned by Access.Scan for a workspace holding more
// entries than it looks at: its denied and protected files cannot all be
// found, and a call that needs them fails closed.
var ErrScanBound = errors.New("workspace too large to scan")

// maxScan bounds the entries Access.Scan looks at (a variable for
// tests).
var maxScan = 200000

// Scan is what Access.Scan found in a workspace.
type Scan struct {
	// Masked are the real paths the policy denies reading (a directory
	// stands for all beneath it): a sandbox makes them unreadable.
	Masked []string
	// Protected are the code-bearing files and directories that exist
	// (a repository's config, hooks and attributes, .gitattributes,
	// .gitmodules, .npmrc, ...; builtin.protected_paths): a sandbox
	// keeps them read-only for every call.
	Protected []string
}

// Scan walks the workspace ws (a real path) and lists the paths the
// policy denies reading and the protected files in it. A nil Access (no
// gate judged the call) masks nothing and still finds the protected
// files. Symbolic links are not followed: a link to a masked file reaches
// the mask. The object stores of repositories (.git/objects) hold no
// names a policy speaks of and are not walked. Directories are listed
// through listings, which keeps each one's names while it is unchanged.
// More than maxScan entries is an error wrapping ErrScanBound.
func (a *Access) Scan(ws string) (Scan, error) {
	var s Scan
	wsSegs := splitFolded(ws)
	n := 0
	var walk func(dir string) error
	walk = func(dir string) error {
		entries, err := listings.list(dir)
		if err != nil {
			if dir == ws {
				return err
			}
			return nil // unreadable here: unreadable to the command too
		}
		for _, en := range entries {
			if n++; n > maxScan {
				return fmt.Errorf("%w: more than %d entries under %s", ErrScanBound, maxScan, ws)
			}
			if en.link {
				continue
			}
			p := dir + "/" + en.name
			if a != nil && a.denied != nil && a.denied(p) {
				s.Masked = append(s.Masked, p)
				continue
			}
			segs := splitFolded(p)
			if protectedFile(segs, wsSegs, en.dir) {
				s.Protected = append(s.Protected, p)
				continue
			}
			if !en.dir || (strings.EqualFold(en.name, "objects") && len(segs) > 1 && segs[len(segs)-2] == ".git") {
				continue
			}
			if err := walk(p); err != nil {
				return err
			}
		}
		return nil
	}
	return s, walk(ws)
}

// protectedFile reports whether the entry at segs (a directory when dir)
// is a code-bearing file a sandbox keeps read-only: every protected path
// but the .git directory itself (whose index, objects and refs git
// writes), and a .git that is a file (it names the git directory git
// uses).
func protectedFile(segs, wsSegs []string, dir bool) bool {
	if segs[len(segs)-1] == ".git" {
		return !dir
	}
	for _, g := range protectedWrite() {
		if g.raw != "**/.git" && g.match(segs, wsSegs) {
			return true
		}
	}
	return false
}

// listings keeps the names of the directories Scan walks.
var listings = &listingCache{recent: 2 * time.Second, max: 200000}

// listingCache keeps each directory's entries (names and whether each is
// a directory or a symbolic link), by path, while the directory is the
// same (device, inode, modification and change times): a directory
// changed less than recent before it was read is not kept (an entry made
// in the same tick of the file system's clock would leave its times as
// they were), and at most max directories are (all are dropped when
// full). Names come and go only with a change of their directory's times,
// and an entry's type changes only by its removal and re-creation.
type listingCache struct {
	recent time.Duration
	max    int

	mu sync.Mutex
	m  map[string]listing
}

type listing struct {
	dev, ino     uint64
	mtime, ctime int64
	entries      []dirEntry
}

type dirEntry struct {
	name      string
	dir, link bool
}

// list is the entries of the directory dir, from the cache while it is
// unchanged.
func (c *listingCache) list(dir string) ([]dirEntry, error) {
	key, err := dirStamp(dir)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	l, ok := c.m[dir]
	c.mu.Unlock()
	if ok && l.dev == key.dev && l.ino == key.ino && l.mtime == key.mtime && l.ctime == key.ctime {
		return l.entries, nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	des, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return nil, err
	}
	key.entries = make([]dirEntry, len(des))
	for i, d := range des {
		key.entries[i] = dirEntry{name: d.Name(), dir: d.IsDir(), link: d.Type()&fs.ModeSymlink != 0}
	}
	if old := time.Now().Add(-c.recent).UnixNano(); key.mtime < old && key.ctime < old {
		c.mu.Lock()
		if c.m == nil || len(c.m) >= c.max {
			c.m = map[string]listing{}
		}
		c.m[dir] = key
		c.mu.Unlock()
	}
	return key.entries, nil
}

// access is the Access of a judged shell command.
func (e *evaluation) access() *Access {
	a := &Access{Write: WriteWorkspace}
	pr := e.shellPathRules(false)
	for _, r := range pr.roots {
		if r != e.ws && !slices.Contains(a.Reads, r) {
			a.Reads = append(a.Reads, r)
		}
	}
	for _, r := range e.outside {
		if !slices.Contains(a.Reads, r) {
			a.Reads = append(a.Reads, r)
		}
	}
	switch {
	case e.writeAny:
	case len(e.writes) == 0:
		a.Write = WriteNone
	default:
		a.Write = WriteNamed
		for _, w := range e.writes {
			if _, in := relWithin(e.ws, w); in && !slices.Contains(a.WriteFiles, w) {
				a.WriteFiles = append(a.WriteFiles, w)
			}
		}
	}
	a.WorkspaceExec = e.effExec().security == SecurityFull
	if len(pr.denied) > 0 {
		a.denied = func(real string) bool { return e.deniedBy(&pr, real, "") != nil }
	}
	return a
}

// relWithin reports whether p lies strictly under root.
func relWithin(root, p string) (string, bool) {
	if root == "" || !within(p, root) || p == root {
		return "", false
	}
	return p[len(root)+1:], true
}

// writesUnknown records that the command runs a program whose writes the
// gate cannot name (any class but read-only).
func (e *evaluation) writesUnknown(cls shell.Class) {
	if cls != shell.ReadOnly {
		e.writeAny = true
	}
}

// judgedWrite records real, a path judged for the shell argument pa, as
// written when pa writes it.
func (e *evaluation) judgedWrite(pa shell.PathArg, real string) {
	if pa.Write && real != "" {
		e.writes = append(e.writes, real)
	}
}
