package shell

import (
	"fmt"
	"reflect"
	"strings"
	"sync"

	"mvdan.cc/sh/v3/syntax"
)

// Rendering: the command line that runs is printed from the syntax tree
// the analysis judged, never the text it was given. Comments are gone,
// every argument the analysis resolved to a literal value is printed as
// that value (bare when it holds only characters no shell treats
// specially, single-quoted otherwise), and the string of a nested shell
// (sh -c, bash -c, watch) is replaced by its own rendering, parsed in the
// dialect of the shell that runs it. Whatever bash would have made of the
// original text, it now runs the tree the analysis saw: a glob the
// analysis took for a literal is quoted, a comment it ended elsewhere than
// bash does is dropped, a word it split differently is printed as it split
// it.

// Dialect is the language a shell string is parsed and rendered in.
type Dialect int

// Dialects.
const (
	// Bash is bash's language (bash, rbash, and the top-level command).
	Bash Dialect = iota
	// POSIX is the POSIX shell language of sh, dash and ash.
	POSIX
)

// dialectOf is the language the shell program base runs: sh, dash and ash
// are POSIX shells (on Debian-like systems /bin/sh is dash), bash and
// rbash run bash's.
func dialectOf(base string) Dialect {
	switch base {
	case "sh", "dash", "ash":
		return POSIX
	}
	return Bash
}

var printers = sync.Pool{New: func() any { return syntax.NewPrinter(syntax.SpaceRedirects(true)) }}

var posixParsers = sync.Pool{New: func() any {
	return syntax.NewParser(syntax.Variant(syntax.LangPOSIX), syntax.KeepComments(true))
}}

// reserved are the words bash reads as syntax in a command's first
// position; a command named so was quoted, and stays quoted.
var reserved = set("!", "{", "}", "[[", "]]", "case", "coproc", "do", "done", "elif", "else", "esac", "fi", "for",
	"function", "if", "in", "select", "then", "time", "until", "while")

// Quote returns v as one shell word that bash and POSIX shells read back as
// exactly v, with no expansion: bare when v holds only letters, digits and
// _./:,+@%=- (and, in command position, no '=' and no reserved word),
// single-quoted otherwise.
func Quote(v string, command bool) string {
	if v == "" {
		return "''"
	}
	if v == "{}" && !command {
		// Literal in bash and POSIX shells; quoting it would put quotes
		// around the name find or xargs fills in, which a name carrying
		// a quote closes.
		return v
	}
	bare := !(command && (strings.IndexByte(v, '=') >= 0 || reserved[v]))
	for i := 0; bare && i < len(v); i++ {
		c := v[i]
		bare = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strings.IndexByte("_./:,+@%=-", c) >= 0
	}
	if bare {
		return v
	}
	return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
}

// quoteTilde renders a literal word that starts with a tilde the shell
// expands (~ or ~/rest): the tilde stays unquoted, the rest is quoted.
func quoteTilde(v string) string {
	if v == "~" || v == "~/" {
		return v
	}
	return "~/" + Quote(v[2:], false)
}

// comments visits every comment of the tree (they hang off many node
// types) and, when clear is set, removes them.
func comments(f *syntax.File, visit func(c syntax.Comment), clear bool) {
	commentsType := reflect.TypeOf([]syntax.Comment(nil))
	syntax.Walk(f, func(n syntax.Node) bool {
		v := reflect.ValueOf(n)
		if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
			return true
		}
		s := v.Elem()
		for i := 0; i < s.NumField(); i++ {
			fv := s.Field(i)
			if fv.Type() != commentsType || !fv.CanSet() {
				continue
			}
			for j := 0; j < fv.Len(); j++ {
				visit(fv.Index(j).Interface().(syntax.Comment))
			}
			if clear {
				fv.Set(reflect.Zero(commentsType))
			}
		}
		return true
	})
}

// render prints the tree the walker judged as the command line that runs.
func (w *walker) render(f *syntax.File) (string, error) {
	if strings.IndexByte(w.src, '#') >= 0 {
		comments(f, func(syntax.Comment) {}, true)
	}
	pin := func(wd *syntax.Word, command bool) {
		if wd == nil {
			return
		}
		r := w.resolve(wd)
		if !r.Literal || r.ProcSubst {
			return
		}
		v := r.Value
		if o, ok := w.repl[wd]; ok {
			v = o
		}
		q := Quote(v, command)
		if r.Tilde && (v == "~" || strings.HasPrefix(v, "~/")) {
			q = quoteTilde(v)
		}
		wd.Parts = []syntax.WordPart{&syntax.Lit{ValuePos: wd.Pos(), ValueEnd: wd.End(), Value: q}}
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CallExpr:
			for i, a := range n.Args {
				pin(a, i == 0)
			}
		case *syntax.Redirect:
			switch n.Op {
			case syntax.RdrOut, syntax.AppOut, syntax.RdrIn, syntax.RdrInOut, syntax.RdrAll, syntax.AppAll,
				syntax.RdrClob, syntax.AppClob, syntax.RdrAllClob, syntax.AppAllClob:
				pin(n.Word, false)
			}
		case *syntax.WordIter:
			for _, it := range n.Items {
				pin(it, false)
			}
		}
		return true
	})
	var b strings.Builder
	pr := printers.Get().(*syntax.Printer)
	err := pr.Print(&b, f)
	printers.Put(pr)
	if err != nil {
		return "", fmt.Errorf("%w: cannot render the command: %v", ErrSyntax, err)
	}
	return trimBlanks(b.String()), nil
}

// trimBlanks removes the blanks and newlines around a printed script,
// keeping a final blank a backslash escapes.
func trimBlanks(s string) string {
	s = strings.TrimLeft(s, " \t\n")
	for len(s) > 0 && strings.IndexByte(" \t\n", s[len(s)-1]) >= 0 && !(len(s) > 1 && s[len(s)-2] == '\\') {
		s = s[:len(s)-1]
	}
	return s
}

// Render returns the command line that runs for src: src parsed, judged
// and printed back from its syntax tree (see Script.Rendered).
func Render(src string) (string, error) {
	s, err := Parse(src)
	if err != nil {
		return "", err
	}
	return s.Rendered, nil
}
