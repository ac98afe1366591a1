package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/pkg/policy/shell"
	"github.com/toolgate/toolgate/pkg/tooldef"
)

// effExec is the exec configuration in force for one request: the
// top-level exec section, the shell tools' rules, and the agent overlays,
// merged.
type effExec struct {
	security    Security
	securityID  string
	ask         AskMode
	askID       string
	safeBins    []pathEntry
	confirm     bool
	confirmID   string
	dangerousWL []tokenPattern
	whitelist   []tokenPattern
	blacklist   []tokenPattern
	ownAction   *verdict
	// neutral: the builtins that only change the shell's own state run
	// alongside whitelisted commands (exec.neutral_builtins: true, and no
	// layer saying false).
	neutral   bool
	neutralID string
	noNeutral bool
}

func (e *evaluation) effExec() *effExec {
	if e.exec != nil {
		return e.exec
	}
	x := &effExec{}
	merge := func(c *execConfig) {
		if c.security > x.security {
			x.security, x.securityID = c.security, c.securityID
		}
		if c.ask != askUnset {
			x.ask, x.askID = c.ask, c.askID
		}
		x.safeBins = append(x.safeBins, c.safeBins...)
		if c.confirmDangerous != nil {
			x.confirm, x.confirmID = *c.confirmDangerous, c.confirmID
		}
		x.dangerousWL = append(x.dangerousWL, c.dangerousWhitelist...)
		if c.neutralBuiltins != nil {
			if *c.neutralBuiltins {
				x.neutral, x.neutralID = true, c.neutralID
			} else {
				x.noNeutral = true
			}
		}
		x.whitelist = append(x.whitelist, c.whitelist...)
		x.blacklist = append(x.blacklist, c.blacklist...)
	}
	for _, l := range e.layers {
		merge(&l.exec)
		for _, r := range l.tools[shellTool] {
			merge(&r.exec)
			x.whitelist = append(x.whitelist, r.whitelist...)
			x.blacklist = append(x.blacklist, r.blacklist...)
			if r.action != nil && r.action.action != Deny {
				x.ownAction = stricter(x.ownAction, r.action)
			}
		}
	}
	if x.ask == askUnset {
		x.ask = AskOnMiss
	}
	if x.noNeutral {
		x.neutral = false
	}
	e.exec = x
	return x
}

// classification reports that the policy says nothing about which commands
// run, so the built-in classification (seed 002) decides.
func (x *effExec) classification() bool {
	return x.security == securityUnset && x.ownAction == nil && len(x.whitelist) == 0 && len(x.safeBins) == 0
}

func (x *effExec) askAction() Action {
	if x.ask == AskOff {
		return Deny
	}
	return Ask
}

// missVerdict is the verdict on a command no whitelist pattern, safe bin or
// classification allows.
func (x *effExec) missVerdict() *verdict {
	var v *verdict
	switch x.security {
	case SecurityAllowlist:
		v = &verdict{action: x.askAction(), id: x.securityID}
	case SecurityFull:
		v = &verdict{action: Allow, id: x.securityID}
	}
	if x.ownAction != nil {
		v = stricter(v, x.ownAction)
	}
	if v == nil {
		id := x.askID
		if id == "" {
			id = "builtin.ask_mode"
		}
		v = &verdict{action: x.askAction(), id: id}
	}
	return v
}

// neutral builtins only change the shell's own state. They run under a
// whitelist only where the policy opts in (neutral_builtins: true).
var neutral = map[string]bool{"cd": true, "pushd": true, "popd": true, "dirs": true, "true": true, "false": true, ":": true,
	"test": true, "[": true, "echo": true, "printf": true, "pwd": true, "exit": true, "return": true, "shift": true,
	"break": true, "continue": true, "wait": true, "set": true, "unset": true, "local": true}

// shell judges a shell command on its syntax tree.
func (e *evaluation) shell() {
	x := e.effExec()
	cmd, ok, err := stringArg(e.req.Arguments, commandArg)
	if err != nil {
		e.deny("builtin.arguments", err.Error(), "")
		return
	}
	if !ok || strings.TrimSpace(cmd) == "" {
		e.deny("builtin.arguments", "argument command is missing or empty", "")
		return
	}
	if x.security == SecurityDeny {
		e.deny(x.securityID, "exec security is deny: no shell command runs", cmd)
		return
	}
	cwd := e.req.Workspace
	if c, ok, err := stringArg(e.req.Arguments, workdirArg); err != nil {
		e.deny("builtin.arguments", err.Error(), "")
		return
	} else if ok && c != "" {
		pr := e.shellRules(false)
		abs := c
		if !filepath.IsAbs(c) {
			abs = e.req.Workspace + "/" + c
		}
		if c[0] == '~' || (!filepath.IsAbs(c) && e.req.Workspace == "") {
			e.hardAsk("builtin.shell.cwd", "working directory "+c+" cannot be judged", c)
			cwd = ""
		} else {
			e.judgePath(pr, abs, c, false, true)
			cwd = abs
		}
	}
	script, err := shell.Parse(cmd)
	if err != nil {
		e.deny("builtin.shell.parse", err.Error(), clip(cmd))
		return
	}
	// What runs is the rendering of the tree, and what is judged is the
	// tree of that very text: a second parse, which must render to itself
	// (the first one, when the command was written as it renders).
	judged, err := script, error(nil)
	if script.Rendered != cmd {
		judged, err = shell.Parse(script.Rendered)
	}
	if err != nil {
		e.deny("builtin.shell.render", "the command as rendered from its syntax tree cannot be analysed: "+err.Error(), clip(script.Rendered))
		return
	}
	if judged.Rendered != script.Rendered {
		e.hardAsk("builtin.shell.render", "the command renders differently each time it is parsed", clip(script.Rendered))
	}
	e.rendered, e.hasRendered = script.Rendered, true
	for _, h := range script.Lost {
		e.hazard(h, h.Source)
	}
	script = judged
	cwds, unknown := e.cwds(cwd, script.Dirs)
	for _, h := range script.Hazards {
		e.hazard(h, h.Source)
	}
	ran := false
	for _, c := range script.Commands {
		e.command(c, x, cwds, unknown)
		ran = ran || (!c.Wrapper && len(c.Args) > 0)
	}
	if !ran && (len(script.Commands) > 0 || strings.TrimSpace(script.Rendered) == "") {
		// A wrapper with nothing left to judge, or a command of comments
		// only: nothing left to judge is never an allow.
		e.hardAsk("builtin.shell.empty", "the command runs no program the gate can judge", clip(script.Rendered))
	}
	for _, r := range script.Redirects {
		e.redirect(r, cwds, unknown)
	}
	for _, pa := range script.Paths {
		e.shellPath(pa, cwds, unknown, pa.Path)
	}
}

// hazard records a finding of the shell analysis. The offending part is
// the word, option or redirection that drove it when the analysis names
// one, else the command it is in.
func (e *evaluation) hazard(h shell.Hazard, src string) {
	reason, off := h.Detail, src
	if h.Part != "" && h.Part != src {
		off = h.Part
		if src != "" {
			reason += " (in " + clip(src) + ")"
		}
	}
	e.hardAsk("builtin.shell."+string(h.Kind), reason, off)
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// cwds returns every directory a relative path may be resolved against:
// the working directory and every directory the script may change into.
func (e *evaluation) cwds(cwd string, dirs []shell.Word) ([]string, bool) {
	if cwd == "" {
		return nil, true
	}
	out := []string{cwd}
	for _, d := range dirs {
		if !d.Literal {
			return out, true
		}
		v := d.Value
		if d.Tilde && (v == "~" || strings.HasPrefix(v, "~/")) {
			if e.p.home == "" {
				return out, true
			}
			v = e.p.home + v[1:]
		}
		if filepath.IsAbs(v) {
			out = append(out, v)
		} else {
			for _, base := range out[:len(out):len(out)] {
				out = append(out, base+"/"+v)
			}
		}
		if len(out) > 32 {
			return out, true
		}
	}
	return out, false
}

// shellRules are the path rules for a shell command's arguments: the
// shell tool's roots and denied paths, plus the denied paths of the read
// tool (for reads) or of the write and edit tools (for writes).
func (e *evaluation) shellRules(write bool) *pathRules {
	pr := e.shellPathRules(write)
	return &pr
}

func (e *evaluation) shellPathRules(write bool) pathRules {
	pr := e.pathRulesFor(shellTool, KindExecute, false)
	others, kind := tooldef.WithPath(tooldef.Reads, tooldef.File), KindRead
	if write {
		others, kind = tooldef.WithPath(tooldef.Writes, ""), KindWrite
	}
	for _, l := range e.layers {
		for _, t := range others {
			for _, r := range l.tools[t] {
				pr.denied = append(pr.denied, r.constraints.denied...)
			}
		}
		if r := l.kinds[kind]; r != nil {
			pr.denied = append(pr.denied, r.constraints.denied...)
		}
	}
	if write {
		pr.denied = append(pr.denied, protectedWrite()...)
	}
	return pr
}

// command judges one simple command.
func (e *evaluation) command(c *shell.Command, x *effExec, cwds []string, unknownCwd bool) {
	if len(c.Args) == 0 {
		return
	}
	src := c.Source
	for _, bp := range x.blacklist {
		if blacklistMatch(bp, c) {
			e.deny(bp.id, fmt.Sprintf("%s matches blacklist pattern %q", src, bp.raw), src)
			return
		}
	}
	for _, h := range c.Hazards {
		e.hazard(h, src)
	}
	name := c.Name()
	if name == "" {
		e.writeAny = true
		return
	}
	base := path.Base(name)
	sysName := base
	if strings.Contains(name, "/") && !e.systemProgram(name, cwds, unknownCwd) {
		e.hardAsk("builtin.shell.program", fmt.Sprintf("%s runs %s, which is not the system's %s", src, name, base), src)
		sysName = ""
	}
	if sysName != "" {
		if bin := e.g.systemBinary(sysName); bin != "" && !slices.Contains(e.programs, bin) {
			e.programs = append(e.programs, bin)
		}
	}
	for _, pa := range c.Paths {
		e.shellPath(pa, cwds, unknownCwd, src)
	}
	if c.History != "" && sysName == "git" && len(e.shellPathRules(false).denied) > 0 {
		// The gate cannot see which files the repository's history holds.
		e.hardAsk("builtin.shell.git_history", src+": "+c.History+", and the policy denies paths", src)
	}
	if c.Wrapper {
		return // judged by what it runs
	}
	argv := c.Argv()
	norm := append([]string{base}, argv[1:]...)
	cls, why := shell.Classify(sysName, argv[1:])
	if bad, why2 := shell.ForbiddenArgs(c); bad && sysName != "" {
		cls, why = shell.Forbidden, why2
	}
	e.writesUnknown(cls)
	if x.classification() {
		switch cls {
		case shell.Forbidden:
			e.deny("builtin.classify.forbidden", src+": "+why, src)
			return
		case shell.ReadOnly:
			e.allowed(x, cls, "builtin.classify.read_only", src+": "+why, src, norm)
		default:
			e.add(item{action: x.askAction(), rule: "builtin.classify." + strings.ReplaceAll(cls.String(), "-", "_"),
				reason: src + ": " + why + ": a person decides", offending: src, argv: norm})
		}
		return
	}
	if x.neutral && sysName != "" && neutral[sysName] {
		e.allowed(x, cls, x.neutralID, src+": "+sysName+" only changes the shell's own state, and neutral_builtins lets it run", src, norm)
		return
	}
	for _, wp := range x.whitelist {
		if whitelistMatch(wp, c, sysName) {
			e.allowed(x, cls, wp.id, fmt.Sprintf("%s matches whitelist pattern %q", src, wp.raw), src, norm)
			return
		}
	}
	for _, sb := range x.safeBins {
		if sysName != "" && sb.raw == sysName {
			e.allowed(x, cls, sb.id, src+": "+sysName+" is a safe bin", src, norm)
			return
		}
	}
	v := x.missVerdict()
	if v.action == Allow {
		e.allowed(x, cls, v.id, src+": allowed by "+v.id, src, norm)
		return
	}
	reason := src + ": not whitelisted nor a safe bin"
	if v.action == Ask {
		reason += ": a person decides"
	}
	e.add(item{action: v.action, rule: v.id, reason: reason, offending: src, argv: norm})
}

// allowed records an allowed command, unless dangerous commands need
// confirming or the ask mode is always.
func (e *evaluation) allowed(x *effExec, cls shell.Class, rule, reason, src string, argv []string) {
	if x.confirm && cls == shell.Dangerous {
		covered := false
		for _, p := range x.dangerousWL {
			if tokensMatchStrings(p.tokens, argv) {
				covered = true
				break
			}
		}
		if !covered {
			e.add(item{action: Ask, rule: x.confirmID, reason: src + ": dangerous commands are confirmed by a person", offending: src, argv: argv})
			return
		}
	}
	if x.ask == AskAlways {
		e.add(item{action: Ask, rule: x.askID, reason: src + ": the ask mode is always", offending: src, argv: argv})
		return
	}
	e.add(item{action: Allow, rule: rule, reason: reason, offending: src, argv: argv})
}

// systemProgram reports whether a program named by a path is the system's
// program of that name.
func (e *evaluation) systemProgram(name string, cwds []string, unknownCwd bool) bool {
	sys := e.g.systemBinary(path.Base(name))
	if sys == "" {
		return false
	}
	cands := []string{name}
	if !filepath.IsAbs(name) {
		if unknownCwd {
			return false
		}
		cands = cands[:0]
		for _, d := range cwds {
			cands = append(cands, d+"/"+name)
		}
	}
	for _, c := range cands {
		r, err := resolvePath(c)
		if err != nil || r != sys {
			return false
		}
	}
	return true
}

// shellPath judges a path a command may open.
func (e *evaluation) shellPath(pa shell.PathArg, cwds []string, unknownCwd bool, src string) {
	p := pa.Path
	if p == "" || devPaths[p] {
		return
	}
	if strings.IndexByte(p, 0) >= 0 {
		e.deny("builtin.arguments", "path contains a NUL byte", src)
		return
	}
	if pa.Write && shell.RawDevice(p) {
		e.deny("builtin.shell.device", src+" writes "+p+", a raw disk or memory device", p)
		return
	}
	pr := e.shellRules(pa.Write)
	if pa.Tilde && (p == "~" || strings.HasPrefix(p, "~/")) {
		if e.p.home == "" {
			e.hardAsk("builtin.shell.path", "~ cannot be judged: no home directory is known", src)
			return
		}
		p = e.p.home + p[1:]
	}
	switch {
	case filepath.IsAbs(p):
		e.judgedWrite(pa, e.judgePath(pr, p, pa.Path, pa.Write, true))
		e.historyFile(pr, pa, []string{p}, src)
		e.treeDenied(pr, pa, p)
	case unknownCwd:
		e.hardAsk("builtin.shell.cwd", fmt.Sprintf("relative path %s with a working directory not known statically", pa.Path), src)
	default:
		abs := make([]string, 0, len(cwds))
		for _, d := range cwds {
			e.judgedWrite(pa, e.judgePath(pr, d+"/"+p, pa.Path, pa.Write, true))
			e.treeDenied(pr, pa, d+"/"+p)
			abs = append(abs, d+"/"+p)
		}
		e.historyFile(pr, pa, abs, src)
	}
	if pa.Write {
		e.writeLevel(pa.Path, src)
	}
}

// maxTreeWalk bounds the entries of a directory looked at for the files
// a recursive reader would open; a larger tree asks.
const maxTreeWalk = 20000

// treeDenied judges the files a recursive reader (grep -r, rg) opens
// beneath a directory where the policy denies paths: no check sees them
// opened, so a denied file in the tree now is a denied read. The tree is
// walked as it is when judged.
func (e *evaluation) treeDenied(pr *pathRules, pa shell.PathArg, abs string) {
	if !pa.Tree || len(pr.denied) == 0 {
		return
	}
	real, err := e.resolve(abs)
	if err != nil {
		return // judged (and denied) by judgePath
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return
	}
	n := 0
	var denied *pathGlob
	var at string
	errStop := errors.New("stop")
	werr := filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if n++; n > maxTreeWalk {
			return errStop
		}
		if d.IsDir() {
			return nil
		}
		target := p
		if d.Type()&fs.ModeSymlink != 0 {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				target = r
			}
		}
		if g := e.deniedBy(pr, target, p); g != nil {
			denied, at = g, p
			return errStop
		}
		return nil
	})
	switch {
	case denied != nil:
		e.deny(denied.id, fmt.Sprintf("reading every file beneath %s reads %s, which is denied by %q", pa.Path, at, denied.raw), pa.Path)
	case errors.Is(werr, errStop):
		e.hardAsk("builtin.shell.tree", fmt.Sprintf("%s holds more than %d entries, too many to judge the files a recursive read opens", pa.Path, maxTreeWalk), pa.Path)
	}
}

// historyFile asks about a git pathspec (PathArg.File) that is not an
// existing regular file where the policy denies paths: over the
// repository's history it reaches every file under it, which no rule sees.
func (e *evaluation) historyFile(pr *pathRules, pa shell.PathArg, abs []string, src string) {
	if !pa.File || len(pr.denied) == 0 {
		return
	}
	for _, a := range abs {
		if fi, err := os.Lstat(a); err != nil || !fi.Mode().IsRegular() {
			e.hardAsk("builtin.shell.git_history", fmt.Sprintf("%s: the pathspec %s is not a file of the worktree, and over the repository's history it reaches every file under it, while the policy denies paths", src, pa.Path), src)
			return
		}
	}
}

// redirect judges a redirection: output to a file is a write, judged by the
// write rules for that path.
func (e *evaluation) redirect(r *shell.Redirect, cwds []string, unknownCwd bool) {
	t := r.Target
	if !t.Literal {
		e.hardAsk("builtin.shell.expansion", "redirection target is not known statically", r.Source)
		return
	}
	v := t.Value
	if devPaths[v] {
		return
	}
	if strings.HasPrefix(v, "/dev/tcp/") || strings.HasPrefix(v, "/dev/udp/") {
		e.hardAsk("builtin.shell.network", r.Source+" opens a network connection", r.Source)
		return
	}
	e.shellPath(shell.PathArg{Path: v, Tilde: t.Tilde, Write: r.Write}, cwds, unknownCwd, r.Source)
}

// writeLevel adds the write tool's own verdict for a write a shell command
// makes: if writing needs a person or is denied, so does this.
func (e *evaluation) writeLevel(target, src string) {
	it := e.toolVerdict(tooldef.Write.Name, KindWrite, true, tooldef.Write.Name)
	if it == nil || it.action == Allow {
		return
	}
	e.add(item{action: it.action, rule: it.rule, reason: fmt.Sprintf("%s writes %s, and writing is %s by %s", src, target, it.action, it.rule),
		offending: src, hard: true})
}

// tokMatch matches one argv token against a pattern token: * matches any
// run of characters (slashes included), ? one character.
func tokMatch(pat, s string) bool {
	for len(pat) > 0 {
		switch pat[0] {
		case '*':
			for len(pat) > 0 && pat[0] == '*' {
				pat = pat[1:]
			}
			if pat == "" {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if tokMatch(pat, s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
			s = s[1:]
			pat = pat[1:]
		case '\\':
			if len(pat) > 1 {
				pat = pat[1:]
			}
			fallthrough
		default:
			if s == "" || s[0] != pat[0] {
				return false
			}
			s, pat = s[1:], pat[1:]
		}
	}
	return s == ""
}

// tokensMatchStrings matches a whole pattern against argv: a final * token
// matches any number of remaining arguments, zero included.
func tokensMatchStrings(pat, argv []string) bool {
	if len(pat) == 0 || len(argv) == 0 || !tokMatch(pat[0], argv[0]) {
		return false
	}
	for i := 1; i < len(pat); i++ {
		if pat[i] == "*" && i == len(pat)-1 {
			return true
		}
		if i >= len(argv) || !tokMatch(pat[i], argv[i]) {
			return false
		}
	}
	return len(argv) == len(pat)
}

// whitelistMatch matches a command against a whitelist pattern. Every
// argument must be known; the program is matched by its system name, or
// literally when the pattern names a path.
func whitelistMatch(p tokenPattern, c *shell.Command, sysName string) bool {
	argv := make([]string, len(c.Args))
	for i, a := range c.Args {
		if !a.Literal {
			return false
		}
		argv[i] = a.Value
	}
	if !strings.Contains(p.tokens[0], "/") {
		if sysName == "" {
			return false
		}
		argv[0] = sysName
	}
	return tokensMatchStrings(p.tokens, argv)
}

// blacklistMatch matches a command against a blacklist pattern, on its
// tokens and again with options normalised (rm -r -f, rm -fr and
// rm --recursive --force all match rm -rf *). An argument not known
// statically may be anything, so it matches any pattern for its program.
func blacklistMatch(p tokenPattern, c *shell.Command) bool {
	name := c.Args[0]
	if !name.Literal {
		return false
	}
	base := path.Base(name.Value)
	if !tokMatch(p.tokens[0], base) && !tokMatch(p.tokens[0], name.Value) {
		return false
	}
	args := c.Args[1:]
	pat := p.tokens[1:]
	for _, a := range args {
		if !a.Literal && !a.ProcSubst {
			return true
		}
	}
	argv := make([]string, len(args))
	for i, a := range args {
		argv[i] = a.Value
	}
	if tokensMatchStrings(append([]string{"x"}, pat...), append([]string{"x"}, argv...)) {
		return true
	}
	pflags, ppos, open := splitOptions(base, pat, true)
	aflags, apos, _ := splitOptions(base, argv, false)
	for f := range pflags {
		if !aflags[f] {
			return false
		}
	}
	for i, t := range ppos {
		if i >= len(apos) || !tokMatch(t, apos[i]) {
			return false
		}
	}
	return open || len(apos) == len(ppos)
}

// splitOptions separates options (short clusters split into letters, long
// names aliased to their short letter where common) from operands.
func splitOptions(prog string, toks []string, pattern bool) (map[string]bool, []string, bool) {
	flags := map[string]bool{}
	var pos []string
	open, dd := false, false
	for i, t := range toks {
		switch {
		case pattern && t == "*" && i == len(toks)-1:
			open = true
		case dd || t == "-" || !strings.HasPrefix(t, "-"):
			pos = append(pos, t)
		case t == "--":
			dd = true
		case strings.HasPrefix(t, "--"):
			n, _, _ := strings.Cut(t[2:], "=")
			flags[longAlias(prog, n)] = true
		default:
			for _, r := range t[1:] {
				flags[shortAlias(prog, string(r))] = true
			}
		}
	}
	return flags, pos, open
}

func longAlias(prog, n string) string {
	switch n {
	case "recursive":
		if prog == "chmod" || prog == "chown" || prog == "chgrp" {
			return "R"
		}
		return "r"
	case "force":
		return "f"
	}
	return "--" + n
}

func shortAlias(prog, s string) string {
	if s == "R" && (prog == "rm" || prog == "cp") {
		return "r"
	}
	return s
}
