package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"unicode"
	"unicode/utf8"
)

// pathGlob is a compiled denied_paths pattern.
type pathGlob struct {
	id   string
	raw  string
	line int
	// wsRelative patterns are joined to the workspace at match time.
	wsRelative bool
	segs       []string // folded
	match1     []segMatcher
	// prefix is the leading literal part of segs (no meta characters): a
	// directory equal to it holds only denied paths, an ancestor of it
	// holds some.
	prefix []string
}

// compileGlob compiles a path pattern: ~ is the home directory, ** matches
// any number of directories, a pattern without a slash matches a name at
// any depth, another relative pattern is relative to the workspace.
func compileGlob(raw, home string) (*pathGlob, error) {
	p := strings.TrimSpace(raw)
	g := &pathGlob{raw: raw}
	switch {
	case p == "":
		return nil, errors.New("empty path pattern")
	case p == "~" || strings.HasPrefix(p, "~/"):
		if home == "" {
			return nil, fmt.Errorf("pattern %q needs a home directory and none is known", raw)
		}
		p = home + p[1:]
	case strings.HasPrefix(p, "~"):
		return nil, fmt.Errorf("pattern %q: only ~ and ~/ are understood, not ~user", raw)
	case strings.HasPrefix(p, "/"), strings.HasPrefix(p, "**"):
	case !strings.Contains(strings.TrimSuffix(p, "/"), "/"):
		p = "**/" + p
	default:
		g.wsRelative = true
	}
	if strings.IndexByte(p, 0) >= 0 {
		return nil, fmt.Errorf("pattern %q contains a NUL byte", raw)
	}
	for _, s := range strings.Split(p, "/") {
		switch s {
		case "", ".":
			continue
		case "..":
			return nil, fmt.Errorf("pattern %q: .. is not allowed in path patterns", raw)
		}
		if _, err := path.Match(s, ""); err != nil {
			return nil, fmt.Errorf("bad path pattern %q: %v", raw, err)
		}
		g.segs = append(g.segs, fold(s))
	}
	for _, s := range g.segs {
		g.match1 = append(g.match1, newSegMatcher(s))
	}
	for _, s := range g.segs {
		if strings.ContainsAny(s, "*?[\\") {
			break
		}
		g.prefix = append(g.prefix, s)
	}
	if len(g.prefix) == len(g.segs) && len(g.prefix) > 0 {
		// A fully literal pattern: its parent is the directory of interest.
		g.prefix = g.prefix[:len(g.prefix)-1]
	}
	return g, nil
}

// dirRelation reports how the directory segs relates to the pattern's
// literal prefix: 2 when it is the prefix (its contents are denied), 1 when
// it is an ancestor of the prefix (some contents are denied), 0 otherwise.
func (g *pathGlob) dirRelation(segs, ws []string) int {
	pre := g.prefix
	if g.wsRelative {
		if len(ws) == 0 || len(pre) == 0 {
			return 0
		}
		pre = append(append(make([]string, 0, len(ws)+len(pre)), ws...), pre...)
	}
	if len(pre) == 0 || len(segs) > len(pre) {
		return 0
	}
	for i := range segs {
		if segs[i] != pre[i] {
			return 0
		}
	}
	if len(segs) == len(pre) {
		return 2
	}
	return 1
}

// match reports whether the pattern matches the path or one of its
// ancestors (a denied directory denies everything under it). segs is the
// folded path split into names; ws the folded workspace split likewise.
func (g *pathGlob) match(segs, ws []string) bool {
	if g.wsRelative {
		if len(ws) == 0 || len(segs) < len(ws) {
			return false
		}
		for i := range ws {
			if segs[i] != ws[i] {
				return false
			}
		}
		return matchSegs(g.match1, segs[len(ws):])
	}
	return matchSegs(g.match1, segs)
}

// segMatcher matches one path segment; the common shapes (a literal name,
// *.ext, prefix*, *) avoid path.Match.
type segMatcher struct {
	kind byte // 'l' literal, 's' *suffix, 'p' prefix*, 'a' *, 'd' **, 'g' glob
	s    string
}

func newSegMatcher(s string) segMatcher {
	switch {
	case s == "**":
		return segMatcher{kind: 'd'}
	case s == "*":
		return segMatcher{kind: 'a'}
	case !strings.ContainsAny(s, "*?[\\"):
		return segMatcher{kind: 'l', s: s}
	case s[0] == '*' && !strings.ContainsAny(s[1:], "*?[\\"):
		return segMatcher{kind: 's', s: s[1:]}
	case s[len(s)-1] == '*' && !strings.ContainsAny(s[:len(s)-1], "*?[\\"):
		return segMatcher{kind: 'p', s: s[:len(s)-1]}
	}
	return segMatcher{kind: 'g', s: s}
}

func (m segMatcher) match(seg string) bool {
	switch m.kind {
	case 'l':
		return seg == m.s
	case 's':
		return strings.HasSuffix(seg, m.s)
	case 'p':
		return strings.HasPrefix(seg, m.s)
	case 'a':
		return true
	}
	ok, _ := path.Match(m.s, seg)
	return ok
}

func matchSegs(pat []segMatcher, segs []string) bool {
	if len(pat) == 0 {
		return true // the path is the match or lies under it
	}
	if pat[0].kind == 'd' {
		for k := 0; k <= len(segs); k++ {
			if matchSegs(pat[1:], segs[k:]) {
				return true
			}
		}
		return false
	}
	if len(segs) == 0 || !pat[0].match(segs[0]) {
		return false
	}
	return matchSegs(pat[1:], segs[1:])
}

// fold maps s to a case-folded form: every rune becomes the smallest rune
// of its Unicode simple-folding orbit, so K, k and the Kelvin sign, or s,
// S and ſ, compare equal. Denied paths match case-insensitively everywhere,
// which is what case-insensitive file systems need and stricter elsewhere.
func fold(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return strings.ToLower(s)
	}
	var b strings.Builder
	for _, r := range s {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < m {
				m = f
			}
		}
		b.WriteRune(unicode.ToLower(m))
	}
	return b.String()
}

func splitFolded(p string) []string {
	p = fold(p)
	out := make([]string, 0, 8)
	for _, s := range strings.Split(p, "/") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// errTooManyLinks is returned for symlink loops.
var errTooManyLinks = errors.New("too many levels of symbolic links")

// resolvePath resolves every symbolic link of the absolute path p the way
// the kernel would, .. included (link/.. is the parent of the link's
// target). Components that do not exist are kept as written.
func resolvePath(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("path %q is not absolute", p)
	}
	return resolveFrom("/", p)
}

// resolveFrom resolves rel (relative, or absolute to restart at /) against
// base, a directory already resolved.
func resolveFrom(base, rel string) (string, error) {
	p := rel
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	}
	dest := base
	if filepath.IsAbs(p) {
		dest = "/"
	}
	missing := 0 // trailing components of dest that do not exist
	links := 0
	rest := p
	for rest != "" {
		var comp string
		rest = strings.TrimLeft(rest, "/")
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			comp, rest = rest[:i], rest[i:]
		} else {
			comp, rest = rest, ""
		}
		switch comp {
		case "", ".":
			continue
		case "..":
			dest = filepath.Dir(dest)
			if missing > 0 {
				missing--
			}
			continue
		}
		next := filepath.Join(dest, comp)
		if missing > 0 {
			dest = next
			missing++
			continue
		}
		fi, err := os.Lstat(next)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				dest, missing = next, 1
				continue
			}
			return "", fmt.Errorf("resolve %s: %w", next, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			dest = next
			continue
		}
		links++
		if links > 40 {
			return "", fmt.Errorf("resolve %s: %w", filepath.Join(base, rel), errTooManyLinks)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", fmt.Errorf("resolve %s: %w", next, err)
		}
		if filepath.IsAbs(target) {
			dest = "/"
		}
		rest = target + "/" + rest
	}
	return dest, nil
}

// within reports whether p is root or lies under it.
func within(p, root string) bool {
	if root == "/" {
		return true
	}
	return p == root || (strings.HasPrefix(p, root) && len(p) > len(root) && p[len(root)] == '/')
}

// devPaths are files any command may use without touching the workspace.
var devPaths = map[string]bool{"/dev/null": true, "/dev/stdin": true, "/dev/stdout": true, "/dev/stderr": true,
	"/dev/zero": true, "/dev/urandom": true, "/dev/random": true, "/dev/tty": true, "/dev/fd/0": true, "/dev/fd/1": true,
	"/dev/fd/2": true}

// protectedWrite are paths whose writing lets later, innocent-looking
// commands run programs: git runs what its configuration (core.fsmonitor,
// core.pager, diff, filter and merge drivers, include.path, remote
// upload-pack, ...), its hooks and the attributes that pick drivers name,
// and follows a .git file (gitdir:) or commondir to another git directory.
// A write to any of them, at any depth and in any letter case, asks. The
// first five name the commonest targets in the decision; the sixth covers
// everything else under or named .git. A write into a directory that
// directly holds one of them (a recursive copy or an extraction) asks by
// the same entry. Compiled on first use.
var protectedWrite = sync.OnceValue(func() []*pathGlob {
	return []*pathGlob{
		mustGlob("**/.git/config", "builtin.protected_paths[0]"),
		mustGlob("**/.git/hooks", "builtin.protected_paths[1]"),
		mustGlob("**/.git/info/attributes", "builtin.protected_paths[2]"),
		mustGlob("**/.git/modules/*/config", "builtin.protected_paths[3]"),
		mustGlob("**/.git/modules/*/hooks", "builtin.protected_paths[4]"),
		mustGlob("**/.git", "builtin.protected_paths[5]"),
		mustGlob("**/.gitattributes", "builtin.protected_paths[6]"),
		mustGlob("**/.gitmodules", "builtin.protected_paths[7]"),
		// Package managers read the project's own settings, which name
		// programs (npm's script-shell, node-options; yarn's yarnPath).
		mustGlob("**/.npmrc", "builtin.protected_paths[8]"),
		mustGlob("**/.yarnrc", "builtin.protected_paths[9]"),
		mustGlob("**/.yarnrc.yml", "builtin.protected_paths[10]"),
	}
})

func mustGlob(p, id string) *pathGlob {
	g, err := compileGlob(p, "")
	if err != nil {
		panic(err)
	}
	g.id = id
	return g
}
