package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/toolgate/toolgate/pkg/tooldef"
)

// resolve resolves an absolute path, starting from the resolved workspace
// when the path lies under the workspace as given.
func (e *evaluation) resolve(abs string) (string, error) {
	if ws := e.req.Workspace; e.ws != "" && len(abs) > len(ws) && strings.HasPrefix(abs, ws) && abs[len(ws)] == '/' {
		return resolveFrom(e.ws, abs[len(ws)+1:])
	}
	return resolvePath(abs)
}

// root resolves an absolute directory, caching the result.
func (g *Gate) root(p string) (string, error) {
	r, err := g.rootOf(p)
	return r.real, err
}

// resolvedRoot is a root's real path and its folded segments, which the
// globs match against; both are shared and never changed.
type resolvedRoot struct {
	real string
	segs []string
}

// rootOf resolves an absolute directory once; later calls share the
// result.
func (g *Gate) rootOf(p string) (resolvedRoot, error) {
	if !filepath.IsAbs(p) {
		return resolvedRoot{}, fmt.Errorf("workspace %q is not absolute", p)
	}
	if v, ok := g.roots.Load(p); ok {
		return v.(resolvedRoot), nil
	}
	r, err := resolvePath(p)
	if err != nil {
		return resolvedRoot{}, err
	}
	rr := resolvedRoot{real: r, segs: splitFolded(r)}
	g.roots.Store(p, rr)
	return rr, nil
}

// expandRoot turns an allowed_paths entry into an absolute path: ./ and
// relative entries are relative to the workspace, ~ is the home directory.
func (e *evaluation) expandRoot(raw string) string {
	r := strings.TrimSpace(raw)
	switch {
	case r == "~" || strings.HasPrefix(r, "~/"):
		if e.p.home == "" {
			return ""
		}
		return filepath.Join(e.p.home, r[1:])
	case filepath.IsAbs(r):
		return filepath.Clean(r)
	case e.req.Workspace == "":
		return ""
	}
	return filepath.Join(e.req.Workspace, r)
}

// pathRules gathers the roots and denied globs that judge a path for tool.
type pathRules struct {
	roots  []string // resolved
	denied []*pathGlob
	// allowedIDs names the first allowed_paths entry, for reasons.
	allowedID string
}

func (e *evaluation) pathRulesFor(tool string, kind Kind, write bool) pathRules {
	var pr pathRules
	if e.ws != "" {
		pr.roots = append(pr.roots, e.ws)
	}
	addAllowed := func(entries []pathEntry) {
		for _, a := range entries {
			if abs := e.expandRoot(a.raw); abs != "" {
				if r, err := e.g.root(abs); err == nil {
					pr.roots = append(pr.roots, r)
					if pr.allowedID == "" {
						pr.allowedID = a.id
					}
				}
			}
		}
	}
	for _, l := range e.layers {
		addAllowed(l.constraints.allowed)
		pr.denied = append(pr.denied, l.constraints.denied...)
		for _, r := range l.tools[tool] {
			addAllowed(r.constraints.allowed)
			pr.denied = append(pr.denied, r.constraints.denied...)
			if isShellTool(tool) {
				addAllowed(r.exec.allowedDirs)
			}
		}
		if isShellTool(tool) {
			addAllowed(l.exec.allowedDirs)
		}
		if kind != "" {
			if r := l.kinds[kind]; r != nil {
				addAllowed(r.constraints.allowed)
				pr.denied = append(pr.denied, r.constraints.denied...)
			}
		}
	}
	// Tools of one family share their denied paths: a path denied to read
	// is denied to grep, glob and ls too, one denied to write is denied to
	// edit.
	family := pathFamily(tool)
	for _, l := range e.layers {
		for _, t := range family {
			if t == tool {
				continue
			}
			for _, r := range l.tools[t] {
				pr.denied = append(pr.denied, r.constraints.denied...)
			}
		}
	}
	if write {
		pr.denied = append(pr.denied, protectedWrite()...)
	}
	return pr
}

// deniedBy returns the first denied glob matching real (or the lexical
// path lex, when it differs).
func (e *evaluation) deniedBy(pr *pathRules, real, lex string) *pathGlob {
	segs := splitFolded(real)
	var lsegs []string
	if lex != "" && lex != real {
		lsegs = splitFolded(lex)
	}
	for _, g := range pr.denied {
		if g.match(segs, e.wsSegs) || (lsegs != nil && g.match(lsegs, e.wsSegs)) {
			return g
		}
	}
	return nil
}

// judgePath judges one absolute path for a file access. outsideHard makes a
// path outside the roots a hard ask (shell arguments) rather than a deny
// (file tools, which cannot reach it anyway).
func (e *evaluation) judgePath(pr *pathRules, abs, shown string, write, outsideHard bool) (real string) {
	real, err := e.resolve(abs)
	if err != nil {
		e.deny("builtin.fail_closed", fmt.Sprintf("cannot resolve %s: %v", shown, err), shown)
		return ""
	}
	lex := filepath.Clean(abs)
	if g := e.deniedBy(pr, real, lex); g != nil {
		what := "reading"
		if write {
			what = "writing"
		}
		if strings.HasPrefix(g.id, "builtin.protected_paths") {
			e.hardAsk(g.id, fmt.Sprintf("%s %s changes configuration that later commands run programs from", what, shown), shown)
			return
		}
		reason := fmt.Sprintf("%s %s is denied by %q", what, shown, g.raw)
		if real != lex {
			reason += " (it resolves to " + real + ")"
		}
		e.deny(g.id, reason, shown)
		return
	}
	var st syscall.Stat_t
	statErr := syscall.Stat(real, &st)
	if statErr == nil {
		e.statPath, e.statSize = real, st.Size
	}
	if statErr == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR && e.deniedInside(pr, real, shown) {
		return real
	}
	if write && statErr == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		// A write into a directory that holds a protected path (cp -r x/ ./,
		// tar -xC ., rsync -a x/ ./ next to a .git or an .npmrc) can replace
		// it; the globs above judged the directory's own name.
		if g, name := holdsProtected(real, e.wsSegs); g != nil {
			e.hardAsk(g.id, fmt.Sprintf("writing into %s can change %s, configuration that later commands run programs from", shown, name), shown)
		}
	}
	inside := false
	for _, r := range pr.roots {
		if within(real, r) {
			inside = true
			break
		}
	}
	if !inside {
		rule := pr.allowedID
		if rule == "" {
			rule = "builtin.workspace"
		}
		reason := fmt.Sprintf("%s is outside the workspace and the allowed paths", shown)
		if real != lex {
			reason += " (it resolves to " + real + ")"
		}
		if len(pr.roots) == 0 {
			reason = fmt.Sprintf("%s cannot be judged: no workspace is known", shown)
		}
		if outsideHard {
			e.outside = append(e.outside, real)
			e.hardAsk(rule, reason, shown)
		} else {
			e.deny(rule, reason, shown)
		}
		return
	}
	if statErr == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG && st.Nlink > 1 {
		e.hardAsk("builtin.hard_link", fmt.Sprintf("%s has %d hard links: its other names may be denied paths", shown, st.Nlink), shown)
	}
	return real
}

// holdsProtected returns the protected-path glob that an entry directly
// inside the directory dir matches, and the entry's name: a recursive
// write into dir can replace it. Only the literal last name of each glob
// is looked up, so the directory is never listed.
func holdsProtected(dir string, ws []string) (*pathGlob, string) {
	for _, g := range protectedWrite() {
		name := g.segs[len(g.segs)-1]
		p := filepath.Join(dir, name)
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if g.match(splitFolded(p), ws) {
			return g, name
		}
	}
	return nil, ""
}

// deniedInside judges a directory by the denied paths it holds: a
// directory whose contents are all denied (~/.ssh for ~/.ssh/*) is denied,
// one that holds denied paths under it needs a person, since a recursive
// command would read them. Patterns that can match at any depth (**/*.pem)
// are left to the checks of the files actually opened.
func (e *evaluation) deniedInside(pr *pathRules, real, shown string) bool {
	segs := splitFolded(real)
	for _, g := range pr.denied {
		switch g.dirRelation(segs, e.wsSegs) {
		case 2:
			e.deny(g.id, fmt.Sprintf("%s is a directory whose contents are denied by %q", shown, g.raw), shown)
			return true
		case 1:
			if strings.HasPrefix(g.id, "builtin.") {
				continue
			}
			e.hardAsk(g.id, fmt.Sprintf("%s holds paths denied by %q", shown, g.raw), shown)
			return false
		}
	}
	return false
}

// fileTool judges the path arguments of the file tools (read, write,
// edit, ls, glob, grep): the path, and the directory a path pattern
// starts from.
func (e *evaluation) fileTool() {
	arg := pathArg(e.tool)
	raw, present := e.req.Arguments[arg.Name]
	p, isStr := raw.(string)
	if present && !isStr && raw != nil {
		e.deny("builtin.arguments", fmt.Sprintf("argument %s must be a string, not %T", arg.Name, raw), "")
		return
	}
	if p == "" {
		if arg.Required {
			e.deny("builtin.arguments", "argument "+arg.Name+" is missing", "")
			return
		}
		p = "."
	}
	write := arg.Access == tooldef.Writes
	pr := e.pathRulesFor(e.tool, e.kind, write)
	e.filePath(&pr, p, write)
	if d, _ := tooldef.Lookup(e.tool); d.Arg(tooldef.PathPattern) != nil {
		if pat, ok := e.req.Arguments[d.Arg(tooldef.PathPattern).Name].(string); ok {
			if prefix := staticPrefix(pat); prefix != "" && (filepath.IsAbs(prefix) || hasDotDot(prefix)) {
				base := prefix
				if !filepath.IsAbs(prefix) {
					base = filepath.Join(p, prefix)
				}
				e.filePath(&pr, base, false)
			}
		}
	}
	if arg.Access == tooldef.Reads && arg.Target == tooldef.File {
		e.maxSize(p)
	}
}

func hasDotDot(p string) bool {
	for _, s := range strings.Split(p, "/") {
		if s == ".." {
			return true
		}
	}
	return false
}

// staticPrefix is the directory part of a glob pattern before any meta
// character.
func staticPrefix(pat string) string {
	i := strings.IndexAny(pat, "*?[{")
	if i < 0 {
		return filepath.Dir(pat)
	}
	j := strings.LastIndexByte(pat[:i], '/')
	if j < 0 {
		return ""
	}
	if j == 0 {
		return "/"
	}
	return pat[:j]
}

// filePath judges one path as a file tool will use it: relative to the
// workspace, or absolute. A leading ~ is judged both literally and as the
// home directory.
func (e *evaluation) filePath(pr *pathRules, p string, write bool) {
	if strings.IndexByte(p, 0) >= 0 {
		e.deny("builtin.arguments", "path contains a NUL byte", strings.ReplaceAll(p, "\x00", `\0`))
		return
	}
	abs := p
	if !filepath.IsAbs(p) {
		if e.ws == "" {
			e.deny("builtin.workspace", fmt.Sprintf("relative path %s cannot be judged: no workspace is known", p), p)
			return
		}
		abs = e.req.Workspace + "/" + p
	}
	if real := e.judgePath(pr, abs, p, write, false); real != "" {
		e.paths = append(e.paths, real)
	}
	if (p == "~" || strings.HasPrefix(p, "~/")) && e.p.home != "" {
		e.judgePath(pr, e.p.home+p[1:], p, write, false)
	}
}

// maxSize denies reading a file larger than the smallest max_size.
func (e *evaluation) maxSize(p string) {
	var limit int64
	id := ""
	for _, r := range e.rules() {
		if m := r.constraints.maxSize; m > 0 && (limit == 0 || m < limit) {
			limit, id = m, r.constraints.maxSizeID
		}
	}
	if limit == 0 {
		return
	}
	for _, real := range e.paths {
		size := e.statSize
		if real != e.statPath {
			fi, err := os.Stat(real)
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			size = fi.Size()
		}
		if size > limit {
			e.deny(id, fmt.Sprintf("%s is %d bytes, more than max_size %d", p, size, limit), p)
		}
	}
}

// Revision is the revision of the policy in force.
func (g *Gate) Revision() string { return g.pol.Load().revision }

// CheckPath judges the real path of a file a tool has opened or will
// create, for the tool of req: denied_paths, the allowed roots, the
// protected repository files for writes, and hard links.
func (g *Gate) CheckPath(req Request, realPath string) (d Decision) {
	p := g.pol.Load()
	defer func() {
		if r := recover(); r != nil {
			d = Decision{Action: Deny, Reason: fmt.Sprintf("policy evaluation failed: %v", r), Rule: "builtin.fail_closed", Revision: p.revision}
		}
	}()
	e := g.begin(p, req)
	if !filepath.IsAbs(realPath) {
		e.deny("builtin.arguments", fmt.Sprintf("path %s is not absolute", realPath), realPath)
	} else {
		tool := e.tool
		write := isWriteTool(tool)
		pr := e.pathRulesFor(tool, e.kind, write)
		if isShellTool(tool) {
			pr = e.shellPathRules(write)
		}
		e.judgePath(&pr, realPath, realPath, write, false)
	}
	d = Decision{Revision: p.revision, Action: Allow, Reason: "path allowed", Rule: "builtin.allow", Offending: realPath}
	if i := worst(e.items); i >= 0 {
		it := e.items[i]
		d.Action, d.Reason, d.Rule, d.Offending = it.action, it.reason, it.rule, it.offending
	}
	return d
}

// AllowedRoots returns the absolute extra roots (beyond the workspace) the
// policy allows tool to reach for agent: the absolute and ~ entries of
// allowed_paths (and allowed_directories for shell tools), sorted.
// Workspace-relative entries are not included.
func (g *Gate) AllowedRoots(agent, tool string) []string {
	p := g.pol.Load()
	e := &evaluation{g: g, p: p, tool: CanonicalTool(tool), layers: p.layersFor(agent)}
	e.kind, _ = BuiltinKind(e.tool)
	seen := map[string]bool{}
	var out []string
	add := func(entries []pathEntry) {
		for _, a := range entries {
			r := strings.TrimSpace(a.raw)
			if !filepath.IsAbs(r) && r != "~" && !strings.HasPrefix(r, "~/") {
				continue
			}
			if abs := e.expandRoot(r); abs != "" && !seen[abs] {
				seen[abs] = true
				out = append(out, abs)
			}
		}
	}
	for _, l := range e.layers {
		add(l.constraints.allowed)
		for _, r := range l.tools[e.tool] {
			add(r.constraints.allowed)
			if isShellTool(e.tool) {
				add(r.exec.allowedDirs)
			}
		}
		if isShellTool(e.tool) {
			add(l.exec.allowedDirs)
		}
		if e.kind != "" {
			if r := l.kinds[e.kind]; r != nil {
				add(r.constraints.allowed)
			}
		}
	}
	sort.Strings(out)
	return out
}
