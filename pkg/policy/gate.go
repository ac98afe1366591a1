package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Amendment is a scoped exception people grant when they approve a call
// and choose "always allow this": it turns an ask into allow for exactly
// its scope (this agent, this tool, and a command prefix or a path
// pattern). It never turns a deny into allow, and never covers a reason to
// ask other than the rule it was granted against (an unknown expansion, a
// path outside the workspace, a write by redirection).
type Amendment struct {
	// ID names the amendment; decisions cite it as amendments[<id>].
	ID string `json:"id"`
	// Agent is the agent id it applies to (exact).
	Agent string `json:"agent"`
	// Tool is the tool it applies to (aliases accepted).
	Tool string `json:"tool"`
	// CommandPrefix, for shell tools, is the argv prefix every covered
	// simple command starts with, e.g. ["git", "push"].
	CommandPrefix []string `json:"command_prefix,omitempty"`
	// PathPattern, for file tools, is a path glob (same syntax as
	// denied_paths) the resolved path must match.
	PathPattern string `json:"path_pattern,omitempty"`
	// CreatedBy is who granted it.
	CreatedBy string `json:"created_by,omitempty"`
	// Reason is why.
	Reason string `json:"reason,omitempty"`
	// CreatedAt is when.
	CreatedAt time.Time `json:"created_at"`
}

type compiledAmendment struct {
	Amendment
	tool string
	glob *pathGlob
}

// Gate judges requests against a policy. It is safe for concurrent use;
// Set swaps the policy atomically (hot reload).
type Gate struct {
	pol   atomic.Pointer[Policy]
	amend atomic.Pointer[[]compiledAmendment]
	roots sync.Map // absolute path → resolved real path
	bins  sync.Map // program name → real path of the system binary ("" if none)
}

// Interface guards.
var (
	_ Evaluator   = (*Gate)(nil)
	_ PathChecker = (*Gate)(nil)
)

// NewGate returns a gate judging by p (Default() when p is nil).
func NewGate(p *Policy) *Gate {
	g := &Gate{}
	g.Set(p)
	return g
}

// Set replaces the policy; evaluations already running finish with the old
// one. A nil policy means Default().
func (g *Gate) Set(p *Policy) {
	if p == nil {
		p = Default()
	}
	g.pol.Store(p)
}

// Policy returns the policy in force.
func (g *Gate) Policy() *Policy { return g.pol.Load() }

// SetAmendments replaces the amendments in force. Amendments without an
// agent or a tool are ignored, as are path patterns that do not compile.
func (g *Gate) SetAmendments(as []Amendment) {
	home, _ := os.UserHomeDir()
	out := make([]compiledAmendment, 0, len(as))
	for _, a := range as {
		if a.Agent == "" || a.Tool == "" || a.ID == "" {
			continue
		}
		c := compiledAmendment{Amendment: a, tool: CanonicalTool(a.Tool)}
		c.CommandPrefix = append([]string(nil), a.CommandPrefix...)
		if a.PathPattern != "" {
			gl, err := compileGlob(a.PathPattern, home)
			if err != nil {
				continue
			}
			c.glob = gl
		}
		out = append(out, c)
	}
	g.amend.Store(&out)
}

// item is one finding of an evaluation; the strictest decides.
type item struct {
	action    Action
	rule      string
	reason    string
	offending string
	hard      bool     // a reason no amendment covers
	argv      []string // for shell commands: the argv judged
	toolLevel bool     // the tool-level verdict (lists, rules, default)
}

type evaluation struct {
	g      *Gate
	p      *Policy
	req    Request
	tool   string
	kind   Kind
	known  bool
	layers []*layer
	items  []item
	ws     string   // resolved workspace, "" when none
	wsSegs []string // folded
	exec   *effExec
	paths  []string // resolved paths a file tool was judged on
	// statPath and statSize remember the last file judged.
	statPath string
	statSize int64
}

// resolve resolves an absolute path, starting from the resolved workspace
// when the path lies under the workspace as given.
func (e *evaluation) resolve(abs string) (string, error) {
	if ws := e.req.Workspace; e.ws != "" && len(abs) > len(ws) && strings.HasPrefix(abs, ws) && abs[len(ws)] == '/' {
		return resolveFrom(e.ws, abs[len(ws)+1:])
	}
	return resolvePath(abs)
}

// Evaluate judges req. It never panics and fails closed: anything that
// goes wrong while judging is a deny naming the cause.
func (g *Gate) Evaluate(ctx context.Context, req Request) (d Decision) {
	p := g.pol.Load()
	defer func() {
		if r := recover(); r != nil {
			d = Decision{Action: Deny, Reason: fmt.Sprintf("policy evaluation failed: %v", r), Rule: "builtin.fail_closed", Revision: p.revision}
		}
	}()
	if err := ctx.Err(); err != nil {
		return Decision{Action: Deny, Reason: "policy evaluation cancelled: " + err.Error(), Rule: "builtin.fail_closed", Revision: p.revision}
	}
	e := g.begin(p, req)
	e.run()
	return e.decide()
}

func (g *Gate) begin(p *Policy, req Request) *evaluation {
	e := &evaluation{g: g, p: p, req: req, tool: CanonicalTool(req.Tool), kind: req.Kind, known: req.Known}
	if e.kind == "" {
		if k, ok := BuiltinKind(e.tool); ok && req.Known {
			e.kind = k
		}
	}
	e.layers = p.layersFor(req.Agent)
	if req.Workspace != "" {
		if ws, err := g.root(req.Workspace); err == nil {
			e.ws = ws
			e.wsSegs = splitFolded(ws)
		}
	}
	return e
}

func (p *Policy) layersFor(agent string) []*layer {
	ls := make([]*layer, 1, 1+len(p.agents))
	ls[0] = p.base
	for _, o := range p.agents {
		if ok, _ := path.Match(o.pattern, agent); ok {
			ls = append(ls, o.layer)
		}
	}
	return ls
}

func (e *evaluation) add(it item) { e.items = append(e.items, it) }

func (e *evaluation) deny(rule, reason, offending string) {
	e.add(item{action: Deny, rule: rule, reason: reason, offending: offending, hard: true})
}

// hardAsk records a reason that can never be allow: ask, or deny when the
// ask mode is off.
func (e *evaluation) hardAsk(rule, reason, offending string) {
	a := Ask
	if e.askMode() == AskOff {
		a = Deny
	}
	e.add(item{action: a, rule: rule, reason: reason, offending: offending, hard: true})
}

func (e *evaluation) run() {
	tl := e.toolLevel()
	if tl != nil {
		e.items = append(e.items, *tl)
		if tl.action == Deny {
			return
		}
	}
	switch {
	case !e.known:
	case isShellTool(e.tool):
		e.shell()
	case isFileTool(e.tool):
		e.fileTool()
	case e.kind == KindNetwork:
		e.networkTool()
	}
}

// worst returns the index of the strictest item (the first among equals).
func worst(items []item) int {
	best := -1
	for i := range items {
		if best < 0 || items[i].action.Rank() > items[best].action.Rank() {
			best = i
		}
	}
	return best
}

func (e *evaluation) decide() Decision {
	d := Decision{Revision: e.p.revision}
	i := worst(e.items)
	if i < 0 {
		// Nothing said anything: the tool is allowed by its rules and the
		// analysis found nothing.
		d.Action, d.Reason, d.Rule = Allow, "allowed: no rule asks or denies", "builtin.allow"
	} else {
		it := e.items[i]
		d.Action, d.Reason, d.Rule, d.Offending = it.action, it.reason, it.rule, it.offending
		if d.Action == Allow && len(e.items) > 1 {
			// Report the rule that allowed the most specific part.
			for j := len(e.items) - 1; j >= 0; j-- {
				if !e.items[j].toolLevel {
					d.Reason, d.Rule, d.Offending = e.items[j].reason, e.items[j].rule, e.items[j].offending
					break
				}
			}
		}
	}
	if d.Action == Ask && e.known {
		a, rest := e.amendment()
		if rest != nil && rest.action == Ask {
			d.Reason, d.Rule, d.Offending = rest.reason, rest.rule, rest.offending
		}
		if a != nil {
			d.Action = Allow
			d.Rule = "amendments[" + a.ID + "]"
			d.Reason = "allowed by an amendment"
			if a.CreatedBy != "" {
				d.Reason += " granted by " + a.CreatedBy
			}
			if a.Reason != "" {
				d.Reason += ": " + a.Reason
			}
		}
	}
	e.limits(&d)
	return d
}

// limits fills the timeout, approval and size fields from every rule that
// applies to the tool: the shortest timeouts, the most approvers, the
// smallest bounds.
func (e *evaluation) limits(d *Decision) {
	for _, r := range e.rules() {
		if r.timeout > 0 && (d.Timeout == 0 || r.timeout < d.Timeout) {
			d.Timeout = r.timeout
		}
		if d.Action == Ask {
			if r.approvers > d.Approvers {
				d.Approvers = r.approvers
			}
			if r.approvalTimeout > 0 && (d.ApprovalTimeout == 0 || r.approvalTimeout < d.ApprovalTimeout) {
				d.ApprovalTimeout = r.approvalTimeout
			}
		}
		if c := r.constraints; c.maxResults > 0 && (d.MaxResults == 0 || c.maxResults < d.MaxResults) {
			d.MaxResults = c.maxResults
		}
		if c := r.constraints; c.maxSize > 0 && (d.MaxBytes == 0 || c.maxSize < d.MaxBytes) {
			d.MaxBytes = c.maxSize
		}
	}
	if d.Action == Ask && d.Approvers == 0 {
		d.Approvers = 1
	}
}

// rules returns the tool and kind rules that apply to the request.
func (e *evaluation) rules() []*toolRule {
	var out []*toolRule
	for _, l := range e.layers {
		out = append(out, l.tools[e.tool]...)
		if e.kind != "" {
			if r := l.kinds[e.kind]; r != nil {
				out = append(out, r)
			}
		}
	}
	return out
}

var listActions = [3]Action{Allow, Ask, Deny}

func (en *listEntry) matches(tool string, kind Kind) bool {
	switch {
	case en.kind != "":
		return kind != "" && en.kind == kind
	case en.glob != "":
		ok, _ := path.Match(en.glob, tool)
		return ok
	}
	return en.tool == tool
}

// toolLevel is the verdict on the tool itself: lists, tool and kind rules,
// the default, the ask mode for unknown and unlisted tools.
func (e *evaluation) toolLevel() *item {
	return e.toolVerdict(e.tool, e.kind, e.known, e.req.Tool)
}

// toolVerdict judges one tool by name and kind; shown is the name as called.
func (e *evaluation) toolVerdict(tool string, kind Kind, known bool, shown string) *item {
	var best *verdict
	shellRule := false
	allowList := false
	var def *verdict
	for _, l := range e.layers {
		if l.enabled != nil {
			best = stricter(best, l.enabled)
		}
		if len(l.lists[0]) > 0 {
			allowList = true
		}
		for idx, list := range l.lists {
			for i := range list {
				if list[i].matches(tool, kind) {
					best = stricter(best, &verdict{action: listActions[idx], id: list[i].id})
					break
				}
			}
		}
		for _, r := range l.tools[tool] {
			shellRule = true
			if r.action == nil {
				continue
			}
			if isShellTool(tool) && r.action.action != Deny {
				continue // a shell rule's action is its verdict on commands no pattern allows
			}
			best = stricter(best, r.action)
		}
		if kind != "" {
			if r := l.kinds[kind]; r != nil && r.action != nil {
				best = stricter(best, r.action)
			}
		}
		if l.def != nil {
			def = l.def
		}
	}
	if !known {
		if best != nil && best.action == Deny {
			return &item{action: Deny, rule: best.id, reason: fmt.Sprintf("tool %s is denied", shown), toolLevel: true, hard: true}
		}
		if best != nil && best.action == Ask {
			return &item{action: Ask, rule: best.id, reason: fmt.Sprintf("tool %s is not a known tool", shown), toolLevel: true, hard: true}
		}
		return e.askModeItem(fmt.Sprintf("tool %s is not a known tool", shown), true)
	}
	if best != nil {
		return &item{action: best.action, rule: best.id, reason: fmt.Sprintf("tool %s: %s by %s", shown, best.action, best.id), toolLevel: true}
	}
	if isShellTool(tool) && shellRule {
		return nil
	}
	if def != nil {
		return &item{action: def.action, rule: def.id, reason: fmt.Sprintf("tool %s has no rule: default %s", shown, def.action), toolLevel: true}
	}
	if allowList {
		return e.askModeItem(fmt.Sprintf("tool %s is not in the allow list", shown), false)
	}
	if isShellTool(tool) {
		return nil // the built-in command classification decides
	}
	return e.askModeItem(fmt.Sprintf("tool %s has no rule", shown), false)
}

func (e *evaluation) askModeItem(reason string, hard bool) *item {
	x := e.effExec()
	rule := x.askID
	if rule == "" {
		rule = "builtin.ask_mode"
	}
	if x.ask == AskOff {
		return &item{action: Deny, rule: rule, reason: reason + " and the ask mode is off", toolLevel: true, hard: true}
	}
	return &item{action: Ask, rule: rule, reason: reason + ": a person decides", toolLevel: true, hard: hard}
}

func (e *evaluation) askMode() AskMode { return e.effExec().ask }

// root resolves an absolute directory, caching the result.
func (g *Gate) root(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("workspace %q is not absolute", p)
	}
	if v, ok := g.roots.Load(p); ok {
		return v.(string), nil
	}
	r, err := resolvePath(p)
	if err != nil {
		return "", err
	}
	g.roots.Store(p, r)
	return r, nil
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
	var family []string
	switch tool {
	case "read", "ls", "glob", "grep":
		family = []string{"read", "ls", "glob", "grep"}
	case "write", "edit":
		family = []string{"write", "edit"}
	}
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
		pr.denied = append(pr.denied, protectedWrite...)
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
	for _, g := range protectedWrite {
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

// fileTool judges the path arguments of read, write, edit, ls, glob, grep.
func (e *evaluation) fileTool() {
	raw, present := e.req.Arguments["path"]
	p, isStr := raw.(string)
	if present && !isStr && raw != nil {
		e.deny("builtin.arguments", fmt.Sprintf("argument path must be a string, not %T", raw), "")
		return
	}
	if p == "" {
		switch e.tool {
		case "read", "write", "edit":
			e.deny("builtin.arguments", "argument path is missing", "")
			return
		}
		p = "."
	}
	write := isWriteTool(e.tool)
	pr := e.pathRulesFor(e.tool, e.kind, write)
	e.filePath(&pr, p, write)
	if e.tool == "glob" || e.tool == "grep" {
		if pat, ok := e.req.Arguments["pattern"].(string); ok && e.tool == "glob" {
			if prefix := staticPrefix(pat); prefix != "" && (filepath.IsAbs(prefix) || hasDotDot(prefix)) {
				base := prefix
				if !filepath.IsAbs(prefix) {
					base = filepath.Join(p, prefix)
				}
				e.filePath(&pr, base, false)
			}
		}
	}
	if e.tool == "read" {
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

// systemBinary returns the real path of the program name found on the
// system PATH, or "".
func (g *Gate) systemBinary(name string) string {
	if v, ok := g.bins.Load(name); ok {
		return v.(string)
	}
	real := ""
	if p, err := exec.LookPath(name); err == nil && filepath.IsAbs(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			real = r
		}
	}
	g.bins.Store(name, real)
	return real
}

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

// amendment returns the amendment that covers every ask of the evaluation,
// or nil and, when amendments for this agent and tool exist, the first
// finding none of them covers (to report instead of a covered one).
func (e *evaluation) amendment() (*compiledAmendment, *item) {
	as := e.g.amend.Load()
	if as == nil {
		return nil, nil
	}
	var first *item
	for i := range *as {
		a := &(*as)[i]
		if a.Agent != e.req.Agent || a.tool != e.tool {
			continue
		}
		it := e.uncovered(a)
		if it == nil {
			return a, nil
		}
		if first == nil || (it.hard && !first.hard) {
			first = it
		}
	}
	return nil, first
}

// uncovered returns the first finding that is not allow and that a does
// not cover, or nil when a covers them all.
func (e *evaluation) uncovered(a *compiledAmendment) *item {
	shellTool := isShellTool(e.tool)
	fileTool := isFileTool(e.tool)
	commands := 0
	for _, it := range e.items {
		if it.argv != nil {
			commands++
		}
	}
	for i := range e.items {
		it := &e.items[i]
		if it.action == Allow {
			continue
		}
		if it.action == Deny || it.hard {
			return it
		}
		switch {
		case shellTool:
			if len(a.CommandPrefix) == 0 {
				return it
			}
			if it.toolLevel {
				// The tool-level ask is covered when every command is.
				if commands == 0 {
					return it
				}
				for j := range e.items {
					c := &e.items[j]
					if c.argv != nil && c.action != Allow && !hasPrefix(c.argv, a.CommandPrefix) {
						return c
					}
				}
				continue
			}
			if it.argv == nil || !hasPrefix(it.argv, a.CommandPrefix) {
				return it
			}
		case fileTool:
			if a.glob == nil || len(e.paths) == 0 {
				return it
			}
			for _, p := range e.paths {
				if !a.glob.match(splitFolded(p), e.wsSegs) {
					return it
				}
			}
		default:
			if len(a.CommandPrefix) > 0 || a.glob != nil {
				return it
			}
		}
	}
	return nil
}

func hasPrefix(argv, prefix []string) bool {
	if len(argv) < len(prefix) {
		return false
	}
	for i := range prefix {
		if argv[i] != prefix[i] {
			return false
		}
	}
	return true
}

// stringArg returns a string argument; numbers (json.Number) are not strings.
func stringArg(args map[string]any, name string) (string, bool, error) {
	v, ok := args[name]
	if !ok || v == nil {
		return "", false, nil
	}
	switch s := v.(type) {
	case string:
		return s, true, nil
	case json.Number:
		return "", true, fmt.Errorf("argument %s must be a string, not a number", name)
	}
	return "", true, fmt.Errorf("argument %s must be a string, not %T", name, v)
}
