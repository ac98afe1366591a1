// Package shell turns a shell command line into what a policy can judge: the
// simple commands it would run (every pipeline, list, subshell, block,
// function body, command and process substitution, and every command run by
// a wrapper such as env, timeout, xargs, sh -c or find -exec), their
// arguments as far as they are known statically, the redirections, and the
// hazards: the things that cannot be known before the command runs
// (a command name from a variable, eval, a function definition, an
// environment assignment, an unquoted glob) or that make a command execute
// or write where it looks like it only reads (find -delete, rg --pre,
// sed 's/x/y/e', git -c).
//
// Each program the analysis knows is read the way the program reads its own
// command line: one option engine holds their option tables and resolves
// abbreviated long options, clustered short options, attached values, --
// and options after operands as getopt_long and the programs' own parsers
// do. Words bash itself evaluates as code although they look like data -
// a variable name with an array subscript given to printf -v, read,
// test -v or declare, a quoted array value given to declare - are parsed
// and what they would run is judged like any other command.
//
// It parses with mvdan.cc/sh/v3 in bash mode and never executes anything.
// It knows nothing of policies: package policy decides what is allowed.
package shell

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"

	"mvdan.cc/sh/v3/syntax"
)

// Limits that keep analysis bounded whatever the input.
const (
	// MaxLen is the longest command line analysed; longer input is an error.
	MaxLen = 64 << 10
	// MaxDepth is how deeply sh -c strings (and similar) may nest.
	MaxDepth = 4
	// MaxCommands is the most simple commands one script may hold.
	MaxCommands = 512
)

// ErrSyntax is wrapped by every error Parse returns: the input is not a
// command line the analyser can know (bad syntax, too long, nested too
// deeply, NUL bytes).
var ErrSyntax = errors.New("shell command cannot be analysed")

// HazardKind names a reason a command can never be allowed without a person.
type HazardKind string

// Hazard kinds.
const (
	// HazardDynamic: the command name is not known statically.
	HazardDynamic HazardKind = "dynamic_command"
	// HazardExpansion: an argument or target depends on a variable, a
	// substitution or arithmetic, so its value is unknown.
	HazardExpansion HazardKind = "expansion"
	// HazardGlob: an unquoted glob or brace expansion, whose expansion is
	// unknown (a file named --pre=sh becomes an option).
	HazardGlob HazardKind = "glob"
	// HazardEval: eval, source, alias, trap and other builtins that run
	// strings as code or change what names mean.
	HazardEval HazardKind = "eval"
	// HazardFunction: a function definition, which can shadow a command.
	HazardFunction HazardKind = "function"
	// HazardEnv: an environment assignment that can change what a program
	// runs (LD_PRELOAD, GIT_*, PATH, ...).
	HazardEnv HazardKind = "environment"
	// HazardArithmetic: arithmetic on variables, which bash evaluates
	// recursively and can run command substitutions hidden in values.
	HazardArithmetic HazardKind = "arithmetic"
	// HazardScript: runs a script file, stdin or a string the analyser
	// cannot see (sh file.sh, sed -f, awk -f, bash -s).
	HazardScript HazardKind = "script"
	// HazardExec: a flag or program text that runs another program
	// (rg --pre, git -c, awk system(), sed e, fd -x).
	HazardExec HazardKind = "executes"
	// HazardWrite: a flag or program text that writes files where the
	// command otherwise only reads (find -delete, sed -i, sort -o).
	HazardWrite HazardKind = "writes"
	// HazardFollow: follows symbolic links while walking directories, so
	// it can leave the allowed paths (find -L, grep -R, rg -L).
	HazardFollow HazardKind = "follows_symlinks"
	// HazardStdinArgs: arguments come from stdin (xargs).
	HazardStdinArgs HazardKind = "stdin_arguments"
	// HazardUnsupported: a construct the analyser does not model.
	HazardUnsupported HazardKind = "unsupported"
	// HazardSystem: changes the system (date -s, hostname NAME).
	HazardSystem HazardKind = "system"
)

// Hazard is one reason found in a script, with the source text it was found in.
type Hazard struct {
	Kind   HazardKind
	Detail string
	// Source is the simple command (or construct) it was found in.
	Source string
	// Part is the word, option or redirection within Source that drove
	// it, when one did ("--expr=1e id", "'a[$(id)]'"); "" otherwise.
	Part string
}

// Word is one argument as far as it is known before the command runs.
type Word struct {
	// Value is the argument after quote removal, when Literal.
	Value string
	// Literal reports that Value is exactly what the program receives
	// (up to tilde expansion, see Tilde).
	Literal bool
	// Glob reports unquoted *, ? or [...] (or an extended glob).
	Glob bool
	// Brace reports an unquoted brace expansion such as {a,b} or {1..3}.
	Brace bool
	// Tilde reports an unquoted leading ~ or ~/: Value keeps the ~ and the
	// judge expands it to the home directory. ~user, ~+ and ~- are not
	// Literal.
	Tilde bool
	// ProcSubst reports a process substitution <(...) or >(...): the
	// program receives a /dev/fd path.
	ProcSubst bool
	// Raw is the word as written in the script, quotes included.
	Raw string

	node *syntax.Word // where the word is in its tree, for rendering
}

// Assign is an environment assignment in front of a command or given to env.
type Assign struct {
	Name string
	// Value is the assigned value when known statically.
	Value string
}

// PathArg is an argument a command may open as a file.
type PathArg struct {
	// Path is the argument (or the value part of --opt=VALUE) as written.
	Path string
	// Tilde reports that Path starts with a ~ the shell expands.
	Tilde bool
	// Write reports that the command writes or removes it.
	Write bool
	// File reports a path that reads only itself when it is an existing
	// regular file, and everything under it otherwise (a git pathspec
	// over the repository's history).
	File bool
	// Tree reports that the command reads every file beneath the path
	// when it is a directory (grep -r, rg).
	Tree bool
}

// Command is one simple command the script would run.
type Command struct {
	// Args is argv, Args[0] the command name as written.
	Args []Word
	// Assigns are environment assignments for this command.
	Assigns []Assign
	// Wrapper reports that this command only launches another one (env,
	// nice, timeout, xargs, sh -c, ...): the command it runs follows as
	// its own Command, and this one is judged for itself only.
	Wrapper bool
	// WrappedBy names the wrappers this command runs under, outermost first.
	WrappedBy []string
	// Paths are the arguments the command may open as files.
	Paths []PathArg
	// Hazards are reasons specific to this command.
	Hazards []Hazard
	// Source is the text of the command in its script.
	Source string
	// Depth is 0 for the top-level script, 1 inside sh -c, and so on.
	Depth int
	// History, when set, says how the command (git log -p, git show,
	// git diff REV, git cat-file, ...) prints files from git's object
	// store or index that its arguments do not name (githistory.go).
	History string
}

// Name returns the command name when it is literal, else "".
func (c *Command) Name() string {
	if len(c.Args) == 0 || !c.Args[0].Literal {
		return ""
	}
	return c.Args[0].Value
}

// Argv returns the literal arguments; unknown ones are "".
func (c *Command) Argv() []string {
	out := make([]string, len(c.Args))
	for i, w := range c.Args {
		if w.Literal {
			out[i] = w.Value
		}
	}
	return out
}

// Redirect is one redirection of a statement.
type Redirect struct {
	// Op is the operator as written (">", ">>", "<", "&>", ...).
	Op string
	// Target is the file (or fd) redirected to or from.
	Target Word
	// Write reports an output redirection to a file.
	Write bool
	// Read reports an input redirection from a file.
	Read bool
	// Source is the text of the redirection.
	Source string
}

// Script is everything the analyser found in a command line.
type Script struct {
	// Commands are the simple commands in the order they run:
	// substitutions before the command that uses them, wrappers before
	// the commands they run.
	Commands []*Command
	// Redirects are the file redirections of every statement.
	Redirects []*Redirect
	// Hazards are reasons not tied to one simple command (function
	// definitions, assignments, arithmetic).
	Hazards []Hazard
	// Paths are files the script itself looks at ([[ -e f ]], [[ a -nt b ]]).
	Paths []PathArg
	// Dirs are directories commands may change into (cd and pushd
	// targets, git -C, make -C, env -C): relative paths may be resolved
	// against any of them. A non-literal Dir means the directory is unknown.
	Dirs []Word
	// Rendered is the command line that runs: the syntax tree judged,
	// printed back (render.go). A caller that runs the command runs this,
	// never the text it was given.
	Rendered string
	// Lost are findings in the text that rendering removes (a comment
	// ending in a backslash): the rendered script no longer shows them,
	// so a judge of Rendered adds them.
	Lost []Hazard
}

var parsers = sync.Pool{New: func() any {
	return syntax.NewParser(syntax.Variant(syntax.LangBash), syntax.KeepComments(true))
}}

// Parse analyses src. An error (wrapping ErrSyntax) means the command line
// cannot be known and must not run without a person's look, if at all.
func Parse(src string) (*Script, error) {
	a := &analyzer{s: &Script{}}
	r, err := a.parseAs(src, 0, nil, Bash)
	if err != nil {
		return nil, err
	}
	a.s.Rendered = r
	return a.s, nil
}

type analyzer struct {
	s   *Script
	err error
}

func (a *analyzer) parse(src string, depth int, wrappedBy []string) error {
	_, err := a.parseAs(src, depth, wrappedBy, Bash)
	return err
}

// parseAs analyses src in dialect d and returns its rendering.
func (a *analyzer) parseAs(src string, depth int, wrappedBy []string, d Dialect) (string, error) {
	if depth > MaxDepth {
		return "", fmt.Errorf("%w: nested deeper than %d levels of sh -c", ErrSyntax, MaxDepth)
	}
	if len(src) > MaxLen {
		return "", fmt.Errorf("%w: %d bytes, longer than %d", ErrSyntax, len(src), MaxLen)
	}
	if strings.IndexByte(src, 0) >= 0 {
		return "", fmt.Errorf("%w: contains a NUL byte", ErrSyntax)
	}
	pool := &parsers
	if d == POSIX {
		pool = &posixParsers
	}
	p := pool.Get().(*syntax.Parser)
	f, err := p.Parse(strings.NewReader(src), "")
	pool.Put(p)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	w := &walker{a: a, src: src, depth: depth, wrappedBy: wrappedBy, dialect: d, repl: map[*syntax.Word]string{}}
	if strings.IndexByte(src, '#') >= 0 {
		w.badComments(f)
	}
	w.stmts(f.Stmts)
	if a.err != nil {
		return "", a.err
	}
	return w.render(f)
}

// badComments records the comments that end in a backslash.
func (w *walker) badComments(f *syntax.File) {
	comments(f, func(c syntax.Comment) {
		if strings.HasSuffix(c.Text, "\\") || strings.Contains(c.Text, "\\\n") {
			// bash ends a comment at the newline; a parser that read the
			// backslash as a continuation would judge another script.
			w.a.s.Lost = append(w.a.s.Lost, Hazard{Kind: HazardUnsupported,
				Detail: "a comment ends in a backslash, which shells read differently", Source: "#" + strings.TrimRight(c.Text, "\n")})
		}
	}, false)
}

// walker walks one parsed source (the top level or one sh -c string).
type walker struct {
	a         *analyzer
	src       string
	depth     int
	wrappedBy []string
	dialect   Dialect
	// repl are the values words are rendered with instead of their own:
	// a nested shell's string, rendered in turn.
	repl map[*syntax.Word]string
}

func (w *walker) text(n syntax.Node) string {
	if n == nil {
		return ""
	}
	s, e := int(n.Pos().Offset()), int(n.End().Offset())
	if s < 0 || e > len(w.src) || s > e {
		return ""
	}
	return w.src[s:e]
}

func (w *walker) hazard(k HazardKind, detail string, n syntax.Node) {
	w.a.s.Hazards = append(w.a.s.Hazards, Hazard{Kind: k, Detail: detail, Source: w.text(n)})
}

// hazardPart records a hazard of the construct at, driven by its part n.
func (w *walker) hazardPart(k HazardKind, detail string, at, n syntax.Node) {
	w.a.s.Hazards = append(w.a.s.Hazards, Hazard{Kind: k, Detail: detail, Source: w.text(at), Part: w.text(n)})
}

func (w *walker) stmts(ss []*syntax.Stmt) {
	for _, s := range ss {
		w.stmt(s)
	}
}

func (w *walker) stmt(s *syntax.Stmt) {
	if s == nil {
		return
	}
	for _, r := range s.Redirs {
		w.redirect(r)
	}
	if s.Cmd != nil {
		w.command(s.Cmd)
	}
}

func (w *walker) redirect(r *syntax.Redirect) {
	if r.Word != nil {
		w.word(r.Word)
	}
	if r.Hdoc != nil {
		w.word(r.Hdoc)
	}
	if r.N != nil && strings.HasPrefix(r.N.Value, "{") {
		// {var}>file assigns a file descriptor number to a variable.
		w.hazard(HazardExpansion, "redirection names a file-descriptor variable", r)
	}
	op := r.Op.String()
	red := &Redirect{Op: op, Source: w.text(r)}
	switch r.Op {
	case syntax.RdrOut, syntax.AppOut, syntax.RdrAll, syntax.AppAll, syntax.RdrInOut, syntax.RdrClob, syntax.AppClob, syntax.RdrAllClob, syntax.AppAllClob:
		red.Write = true
		if r.Op == syntax.RdrInOut {
			red.Read = true
		}
	case syntax.RdrIn:
		red.Read = true
	case syntax.DplOut, syntax.DplIn:
		// >&2, <&0, >&-: a file descriptor, unless the word is not a number,
		// in which case bash treats >&word as &>word.
		if r.Word != nil {
			if lit := r.Word.Lit(); lit == "-" || isDigits(lit) || (strings.HasSuffix(lit, "-") && isDigits(strings.TrimSuffix(lit, "-"))) {
				return
			}
		}
		red.Write = r.Op == syntax.DplOut
		red.Read = r.Op == syntax.DplIn
	case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
		return
	default:
		red.Write, red.Read = true, true
	}
	if r.Word != nil {
		red.Target = w.resolve(r.Word)
	}
	w.a.s.Redirects = append(w.a.s.Redirects, red)
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func (w *walker) command(c syntax.Command) {
	switch c := c.(type) {
	case *syntax.CallExpr:
		w.call(c)
	case *syntax.IfClause:
		for ic := c; ic != nil; ic = ic.Else {
			w.stmts(ic.Cond)
			w.stmts(ic.Then)
		}
	case *syntax.WhileClause:
		w.stmts(c.Cond)
		w.stmts(c.Do)
	case *syntax.ForClause:
		switch l := c.Loop.(type) {
		case *syntax.WordIter:
			for _, it := range l.Items {
				w.word(it)
			}
			if l.Name != nil {
				by := "for"
				if c.Select {
					by = "select"
				}
				assigned(func(k HazardKind, d string) { w.hazard(k, d, c) }, by, l.Name.Value)
			}
		case *syntax.CStyleLoop:
			w.arith(l.Init, l)
			w.arith(l.Cond, l)
			w.arith(l.Post, l)
		default:
			w.hazard(HazardUnsupported, "unknown loop form", c)
		}
		w.stmts(c.Do)
	case *syntax.CaseClause:
		w.word(c.Word)
		for _, it := range c.Items {
			for _, p := range it.Patterns {
				w.word(p)
			}
			w.stmts(it.Stmts)
		}
	case *syntax.Block:
		w.stmts(c.Stmts)
	case *syntax.Subshell:
		w.stmts(c.Stmts)
	case *syntax.BinaryCmd:
		w.stmt(c.X)
		w.stmt(c.Y)
	case *syntax.FuncDecl:
		w.hazard(HazardFunction, "defines a function, which can shadow any command", c)
		w.stmt(c.Body)
	case *syntax.ArithmCmd:
		w.arith(c.X, c)
	case *syntax.TestClause:
		w.test(c.X, c)
	case *syntax.DeclClause:
		w.decl(c)
	case *syntax.LetClause:
		for _, x := range c.Exprs {
			w.arith(x, c)
		}
	case *syntax.TimeClause:
		w.stmt(c.Stmt)
	case *syntax.CoprocClause:
		if c.Name != nil {
			w.word(c.Name)
			if r := w.resolve(c.Name); r.Literal {
				assigned(func(k HazardKind, d string) { w.hazard(k, d, c) }, "coproc", r.Value)
			}
		}
		w.stmt(c.Stmt)
	default:
		w.hazard(HazardUnsupported, fmt.Sprintf("unsupported construct %T", c), c)
	}
}

// call handles a simple command.
func (w *walker) call(c *syntax.CallExpr) {
	for _, as := range c.Assigns {
		w.assignParts(as)
	}
	for _, arg := range c.Args {
		w.word(arg)
	}
	if len(c.Args) == 0 {
		// Assignments to the shell itself: they reach later commands of
		// the script, and exported names reach every program.
		for _, as := range c.Assigns {
			if as.Name != nil && !shellVarSafe(as.Name.Value) {
				w.hazard(HazardEnv, "assigns "+as.Name.Value+", which changes what later programs run", as)
			}
		}
		return
	}
	words := make([]Word, len(c.Args))
	for i, arg := range c.Args {
		words[i] = w.resolve(arg)
	}
	var assigns []Assign
	for _, as := range c.Assigns {
		if as.Name == nil {
			continue
		}
		v := Assign{Name: as.Name.Value}
		if as.Value != nil {
			v.Value = w.resolve(as.Value).Value
		}
		if as.Array != nil || as.Index != nil || as.Append {
			w.hazard(HazardEnv, "array or append assignment in a command's environment", as)
		}
		assigns = append(assigns, v)
	}
	w.simple(words, assigns, w.text(c), w.wrappedBy)
}

func (w *walker) assignParts(as *syntax.Assign) {
	if as.Value != nil {
		w.word(as.Value)
	}
	if as.Index != nil {
		w.arith(as.Index, as)
	}
	if as.Array != nil {
		for _, el := range as.Array.Elems {
			if el.Index != nil {
				w.arith(el.Index, as)
			}
			if el.Value != nil {
				w.word(el.Value)
			}
		}
	}
}

func (w *walker) decl(c *syntax.DeclClause) {
	variant := ""
	if c.Variant != nil {
		variant = c.Variant.Value
	}
	env := variant == "export"
	for _, as := range c.Args {
		w.assignParts(as)
		if as.Naked && as.Name == nil && as.Value != nil {
			// An option such as -x or -f, or a name from an expansion.
			opt := w.resolve(as.Value)
			switch {
			case !opt.Literal:
				w.hazard(HazardExpansion, variant+" with an argument not known statically", as)
			case strings.HasPrefix(opt.Value, "-") || strings.HasPrefix(opt.Value, "+"):
				flags := strings.TrimLeft(opt.Value, "-+")
				if strings.ContainsAny(flags, "x") {
					env = true
				}
				if strings.ContainsAny(flags, "finI") || (variant == "export" && strings.Contains(flags, "f")) {
					w.hazard(HazardEval, variant+" "+opt.Value+" changes how names or values are evaluated", as)
				}
			default:
				// A quoted name ('a[$(cmd)]' or 'a[$(cmd)]=v'): bash
				// evaluates its subscript, and a quoted array value
				// ('a=($(cmd))') as an assignment.
				name, value, hasValue := strings.Cut(opt.Value, "=")
				if hasValue {
					w.compound(func(k HazardKind, d, part string) { w.hazardPart(k, d, c, as) }, variant, name, value)
				}
				tmp := &Command{Source: w.text(c), Depth: w.depth, WrappedBy: w.wrappedBy, Args: []Word{{Value: variant, Literal: true}}}
				w.nameText(tmp, variant, name)
				w.a.s.Hazards = append(w.a.s.Hazards, tmp.Hazards...)
				if env && !envSafe(name) {
					w.hazardPart(HazardEnv, variant+" "+name+" reaches every program the script runs", c, as)
				}
			}
			continue
		}
		if as.Name == nil {
			continue
		}
		name := as.Name.Value
		if as.Value != nil {
			// a='($(cmd))': evaluated as an array assignment when a is an
			// array.
			if r := w.resolve(as.Value); r.Literal {
				w.compound(func(k HazardKind, d, part string) { w.hazardPart(k, d, c, as) }, variant, name, r.Value)
			}
		}
		if env && !envSafe(name) {
			w.hazard(HazardEnv, variant+" "+name+" reaches every program the script runs", as)
		} else if !env && !shellVarSafe(name) {
			w.hazard(HazardEnv, "assigns "+name+", which changes what later programs run", as)
		}
	}
	if variant == "nameref" {
		w.hazard(HazardEval, "nameref indirection", c)
	}
}

// word walks the parts of a word for substitutions and dangerous expansions.
func (w *walker) word(wd *syntax.Word) {
	if wd == nil {
		return
	}
	for _, p := range wd.Parts {
		w.part(p)
	}
}

func (w *walker) part(p syntax.WordPart) {
	switch p := p.(type) {
	case *syntax.Lit, *syntax.SglQuoted, *syntax.ExtGlob:
	case *syntax.DblQuoted:
		for _, q := range p.Parts {
			w.part(q)
		}
	case *syntax.ParamExp:
		w.param(p)
	case *syntax.CmdSubst:
		if p.TempFile || p.ReplyVar {
			w.hazard(HazardUnsupported, "mksh command substitution form", p)
		}
		w.stmts(p.Stmts)
	case *syntax.ArithmExp:
		w.arith(p.X, p)
	case *syntax.ProcSubst:
		w.stmts(p.Stmts)
	case *syntax.BraceExp:
		for _, e := range p.Elems {
			w.word(e)
		}
	default:
		w.hazard(HazardUnsupported, fmt.Sprintf("unsupported word part %T", p), p)
	}
}

func (w *walker) param(p *syntax.ParamExp) {
	if p.Exp != nil && (p.Exp.Op == syntax.AssignUnset || p.Exp.Op == syntax.AssignUnsetOrNull) && p.Param != nil &&
		!shellVarSafe(p.Param.Value) {
		// ${name:=v} and ${name=v} assign name wherever bash expands
		// them ([[ ]], case, here-strings, arithmetic, substitutions):
		// judged like name=v.
		w.hazard(HazardEnv, "assigns "+p.Param.Value+" inside an expansion, which changes what later programs run", p)
	}
	if w.dialect == POSIX && p.Exp != nil && strings.ContainsAny(w.text(p.Exp.Word), `'"`) {
		// dash and bash in POSIX mode end "${x:-'}" at the first },
		// where the parser reads a quoted word: what follows is code
		// the analysis did not see.
		w.hazard(HazardUnsupported, "a quote inside ${...} of a POSIX shell, which shells read differently", p)
	}
	if p.Exp != nil {
		if p.Exp.Op == syntax.OtherParamOps {
			// ${x@P} expands prompt escapes, which run command substitutions
			// hidden in the value.
			w.hazard(HazardEval, "${...@op} expansion can evaluate the value", p)
		}
		if p.Exp.Word != nil {
			w.word(p.Exp.Word)
		}
	}
	if p.Excl && p.Names == 0 && p.Index == nil {
		w.hazard(HazardEval, "indirect expansion ${!name}", p)
	}
	if p.Index != nil {
		w.arith(p.Index, p)
	}
	if p.Slice != nil {
		w.arith(p.Slice.Offset, p)
		w.arith(p.Slice.Length, p)
	}
	if p.Repl != nil {
		w.word(p.Repl.Orig)
		w.word(p.Repl.With)
	}
	if p.NestedParam != nil {
		w.part(p.NestedParam)
	}
}

// arith walks an arithmetic expression; any variable in it is a hazard,
// because bash evaluates variable values as arithmetic recursively, and
// a value such as a[$(cmd)] runs cmd.
func (w *walker) arith(x syntax.ArithmExpr, at syntax.Node) {
	switch x := x.(type) {
	case nil:
	case *syntax.Word:
		if lit := x.Lit(); lit != "" {
			if c := lit[0]; c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') {
				w.hazard(HazardArithmetic, "arithmetic on variable "+lit, at)
			}
		} else {
			w.hazard(HazardArithmetic, "arithmetic on an expansion", at)
			// let 'a[$(cmd)]', (( "$(cmd)" )): quoted text is expanded,
			// then evaluated; what it runs is judged.
			if r := w.resolve(x); r.Literal && !w.hidden(r.Value, w.wrappedBy) {
				w.hazard(HazardUnsupported, "an expansion inside "+r.Value+" cannot be analysed", at)
			}
		}
		w.word(x)
	case *syntax.BinaryArithm:
		w.arith(x.X, at)
		w.arith(x.Y, at)
	case *syntax.UnaryArithm:
		w.arith(x.X, at)
	case *syntax.ParenArithm:
		w.arith(x.X, at)
	case *syntax.FlagsArithm:
		w.arith(x.X, at)
	default:
		w.hazard(HazardUnsupported, fmt.Sprintf("unsupported arithmetic %T", x), at)
	}
}

func (w *walker) test(x syntax.TestExpr, at syntax.Node) {
	switch x := x.(type) {
	case nil:
	case *syntax.Word:
		w.word(x)
	case *syntax.BinaryTest:
		w.test(x.X, at)
		w.test(x.Y, at)
		if x.Op == syntax.TsNewer || x.Op == syntax.TsOlder || x.Op == syntax.TsDevIno {
			w.testPath(x.X)
			w.testPath(x.Y)
		}
		switch x.Op {
		case syntax.TsEql, syntax.TsNeq, syntax.TsLeq, syntax.TsGeq, syntax.TsLss, syntax.TsGtr:
			// [[ a -eq b ]] evaluates both sides as arithmetic.
			for _, side := range []syntax.TestExpr{x.X, x.Y} {
				if wd, ok := side.(*syntax.Word); ok {
					if r := w.resolve(wd); r.Literal && isDigits(strings.TrimPrefix(r.Value, "-")) {
						continue
					}
				}
				w.hazard(HazardArithmetic, "[[ "+x.Op.String()+" ]] evaluates its operands as arithmetic", at)
				break
			}
		}
	case *syntax.UnaryTest:
		w.test(x.X, at)
		if x.Op != syntax.TsVarSet && x.Op != syntax.TsRefVar && x.Op != syntax.TsNot && x.Op != syntax.TsEmpStr &&
			x.Op != syntax.TsNempStr && x.Op != syntax.TsOptSet {
			// A file test: the file is looked at like test's operand.
			w.testPath(x.X)
		}
		if x.Op == syntax.TsVarSet || x.Op == syntax.TsRefVar {
			// [[ -v a[$(cmd)] ]] evaluates the subscript as arithmetic.
			if wd, ok := x.X.(*syntax.Word); ok {
				r := w.resolve(wd)
				tmp := &Command{Source: w.text(at), Depth: w.depth, WrappedBy: w.wrappedBy, Args: []Word{{Value: "[[", Literal: true}}}
				if r.Literal {
					w.nameText(tmp, "[[ "+x.Op.String()+" ]]", r.Value)
				} else {
					tmp.hazardAt(HazardArithmetic, "[[ "+x.Op.String()+" ]] takes a variable name that is not known statically", w.text(wd))
				}
				w.a.s.Hazards = append(w.a.s.Hazards, tmp.Hazards...)
			}
		}
	case *syntax.ParenTest:
		w.test(x.X, at)
	default:
		w.hazard(HazardUnsupported, fmt.Sprintf("unsupported test %T", x), at)
	}
}

// testPath records the operand of a [[ ]] file test as a path the script
// looks at.
func (w *walker) testPath(x syntax.TestExpr) {
	wd, ok := x.(*syntax.Word)
	if !ok {
		return
	}
	if r := w.resolve(wd); r.Literal && r.Value != "" {
		w.a.s.Paths = append(w.a.s.Paths, PathArg{Path: r.Value, Tilde: r.Tilde})
	}
}

// resolve computes what is statically known of a word. Globs and brace
// expansions are found over the whole word, as bash expands it: quotes
// inside ["-"] or {"a",b} protect the characters they hold, not the
// brackets and braces around them.
func (w *walker) resolve(wd *syntax.Word) Word {
	out := Word{Literal: true}
	var b strings.Builder
	var pat pattern
	for i, p := range wd.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			v := p.Value
			if i == 0 && strings.HasPrefix(v, "~") {
				rest := v[1:]
				end := strings.IndexByte(rest, '/')
				user := rest
				if end >= 0 {
					user = rest[:end]
				}
				if user != "" {
					// ~user, ~+, ~-: not known statically.
					out.Literal = false
				} else if len(wd.Parts) == 1 || end >= 0 {
					out.Tilde = true
				} else {
					// ~"..." : bash does not expand; keep literal.
				}
			}
			b.WriteString(pat.unquoted(v))
		case *syntax.SglQuoted:
			if p.Dollar && strings.ContainsRune(p.Value, '\\') {
				out.Literal = false
			}
			pat.quoted()
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				// $"..." is translated by the locale.
				out.Literal = false
			}
			pat.quoted()
			for _, q := range p.Parts {
				lit, ok := q.(*syntax.Lit)
				if !ok {
					out.Literal = false
					continue
				}
				b.WriteString(unescapeDouble(lit.Value))
			}
		case *syntax.ProcSubst:
			out.ProcSubst = true
			out.Literal = false
		case *syntax.ExtGlob:
			out.Glob = true
			out.Literal = false
		default:
			pat.quoted()
			out.Literal = false
		}
	}
	out.Glob = out.Glob || pat.glob
	out.Brace = pat.brace
	out.Value = b.String()
	out.Raw = w.text(wd)
	out.node = wd
	if !out.Literal && !out.ProcSubst {
		out.Value = ""
	}
	if out.Glob || out.Brace {
		out.Literal = false
	}
	return out
}

// pattern follows the unquoted characters of one word that make it a
// glob or a brace expansion. Its state lasts over the whole word: a
// quoted part between [ and ] or { and } does not reset it.
type pattern struct {
	bracket, braceOpen, braceSep, dot bool
	glob, brace                       bool
}

// quoted records a quoted (or expanded) part: it holds no pattern
// characters but separates two dots.
func (p *pattern) quoted() { p.dot = false }

// unquoted removes the backslash escapes of an unquoted literal part and
// follows its pattern characters.
func (p *pattern) unquoted(s string) string {
	if !strings.ContainsAny(s, "\\*?[]{},.") {
		p.dot = false
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' {
			if i+1 < len(s) {
				if s[i+1] != '\n' {
					b.WriteByte(s[i+1])
				}
				i++
			}
			p.dot = false
			continue
		}
		switch c {
		case '*', '?':
			p.glob = true
		case '[':
			p.bracket = true
		case ']':
			if p.bracket {
				p.glob = true
			}
		case '{':
			p.braceOpen = true
		case ',':
			if p.braceOpen {
				p.braceSep = true
			}
		case '.':
			if p.braceOpen && p.dot {
				p.braceSep = true
			}
		case '}':
			if p.braceOpen && p.braceSep {
				p.brace = true
			}
		}
		p.dot = c == '.'
		b.WriteByte(c)
	}
	return b.String()
}

// unescapeDouble removes the backslash escapes that double quotes honour.
func unescapeDouble(s string) string {
	if !strings.ContainsRune(s, '\\') {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case '$', '`', '"', '\\':
				b.WriteByte(s[i+1])
				i++
				continue
			case '\n':
				i++
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

// simple records one simple command and unwraps what it runs.
func (w *walker) simple(words []Word, assigns []Assign, src string, wrappedBy []string) {
	if len(w.a.s.Commands) >= MaxCommands {
		if w.a.err == nil {
			w.a.err = fmt.Errorf("%w: more than %d commands", ErrSyntax, MaxCommands)
		}
		return
	}
	cmd := &Command{Args: words, Assigns: assigns, Source: src, Depth: w.depth, WrappedBy: wrappedBy}
	w.a.s.Commands = append(w.a.s.Commands, cmd)
	if len(words) == 0 {
		return
	}
	if !words[0].Literal {
		for _, as := range assigns {
			if !envSafe(as.Name) {
				cmd.hazardAt(HazardEnv, "sets "+as.Name+" for the command, which can change what it runs", as.Name+"="+as.Value)
			}
		}
		cmd.Hazards = append(cmd.Hazards, Hazard{Kind: HazardDynamic, Detail: "command name is not known statically", Source: src})
		return
	}
	for i, a := range words {
		if i == 0 {
			continue
		}
		switch {
		case a.Glob || a.Brace:
			cmd.Hazards = append(cmd.Hazards, Hazard{Kind: HazardGlob, Detail: "unquoted glob or brace expansion in an argument", Source: src})
		case !a.Literal && !a.ProcSubst:
			cmd.Hazards = append(cmd.Hazards, Hazard{Kind: HazardExpansion, Detail: "an argument is not known statically", Source: src})
		default:
			continue
		}
		break
	}
	base := path.Base(words[0].Value)
	for _, as := range assigns {
		if !envSafeFor(base, as.Name) {
			cmd.hazardAt(HazardEnv, "sets "+as.Name+" for "+base+", which programs read to change what they run or reach", as.Name+"="+as.Value)
		}
	}
	inner := append(append([]string(nil), wrappedBy...), base)
	if spec, ok := wrappers[base]; ok {
		w.unwrap(cmd, spec, base, inner)
		return
	}
	if shells[base] {
		w.shell(cmd, inner)
		return
	}
	switch base {
	case "find":
		w.find(cmd, inner)
		return
	case "busybox":
		cmd.Wrapper = true
		if len(words) > 1 {
			w.simple(words[1:], nil, src, inner)
		}
		return
	case "watch":
		w.watch(cmd, inner)
		return
	case "jobs":
		if w.jobs(cmd, inner) {
			return
		}
	}
	w.knowledge(cmd, base)
}

// jobs unwraps jobs -x COMMAND ARGS, which runs COMMAND (with job specs
// in ARGS replaced by process group ids); it reports whether it did.
func (w *walker) jobs(cmd *Command, chain []string) bool {
	args := cmd.Args
	x := false
	i := 1
	for ; i < len(args); i++ {
		v := args[i].Value
		if !args[i].Literal {
			cmd.hazard(HazardDynamic, "jobs: an option or the command it runs is not known statically")
			return true
		}
		if v == "--" {
			i++
			break
		}
		if len(v) < 2 || v[0] != '-' {
			break
		}
		x = x || strings.IndexByte(v, 'x') >= 0
	}
	if !x {
		return false
	}
	cmd.Wrapper = true
	if i >= len(args) {
		cmd.hazard(HazardScript, "jobs -x without a command runs nothing the analyser can judge")
		return true
	}
	w.simple(args[i:], nil, cmd.Source, chain)
	return true
}
