// Package gitignore matches paths against .gitignore files with git's
// rules (gitignore(5)): blank lines and # comments, ! negation, a trailing
// / for directories only, patterns with a slash anchored to the file's
// directory and patterns without one matched against the name at any
// depth, *, ?, [...] classes that never match /, and ** as a whole path
// component. Within a file the last matching pattern wins; in a Stack the
// deepest file that has a matching pattern wins.
package gitignore

import (
	"bufio"
	"bytes"
	"path"
	"regexp"
	"strings"
)

// Matcher is the patterns of one .gitignore file.
type Matcher struct {
	patterns []pattern
}

type pattern struct {
	re       *regexp.Regexp
	negate   bool
	dirOnly  bool
	basename bool // match against the last component only
	literal  string
	isLit    bool
}

// Parse reads the patterns of a .gitignore file. Lines that can match
// nothing in git (a trailing backslash, an unclosed bracket) are skipped.
func Parse(data []byte) *Matcher {
	m := &Matcher{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		if p, ok := compile(sc.Text()); ok {
			m.patterns = append(m.patterns, p)
		}
	}
	return m
}

// Len returns the number of patterns.
func (m *Matcher) Len() int { return len(m.patterns) }

func compile(line string) (pattern, bool) {
	line = strings.TrimSuffix(line, "\r")
	if line == "" || line[0] == '#' {
		return pattern{}, false
	}
	// Trailing spaces are dropped unless escaped with a backslash.
	for strings.HasSuffix(line, " ") && !strings.HasSuffix(line, "\\ ") {
		line = line[:len(line)-1]
	}
	if line == "" {
		return pattern{}, false
	}
	var p pattern
	if line[0] == '!' {
		p.negate = true
		line = line[1:]
	}
	if strings.HasSuffix(line, "/") {
		p.dirOnly = true
		line = strings.TrimRight(line, "/")
	}
	if line == "" {
		return pattern{}, false
	}
	if !strings.Contains(line, "/") {
		p.basename = true
	}
	line = strings.TrimPrefix(line, "/")
	expr, lit, isLit, ok := translate(line)
	if !ok {
		return pattern{}, false
	}
	if isLit {
		p.literal, p.isLit = lit, true
		return p, true
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return pattern{}, false
	}
	p.re = re
	return p, true
}

// translate turns a gitignore glob into an anchored regular expression. It
// also reports whether the glob is a plain literal.
func translate(g string) (expr, lit string, isLit, ok bool) {
	var b strings.Builder
	var l strings.Builder
	isLit = true
	b.WriteString("^")
	for i := 0; i < len(g); {
		c := g[i]
		atStart := i == 0 || g[i-1] == '/'
		switch {
		case c == '*' && strings.HasPrefix(g[i:], "**") && atStart && (i+2 == len(g) || g[i+2] == '/'):
			isLit = false
			if i+2 == len(g) {
				b.WriteString(".*")
				i += 2
			} else {
				b.WriteString("(?:.*/)?")
				i += 3
			}
		case c == '*':
			isLit = false
			for i < len(g) && g[i] == '*' {
				i++
			}
			b.WriteString("[^/]*")
		case c == '?':
			isLit = false
			b.WriteString("[^/]")
			i++
		case c == '[':
			cls, n, good := class(g[i:])
			if !good {
				// git's wildmatch matches nothing with an unclosed bracket.
				return "", "", false, false
			}
			isLit = false
			b.WriteString(cls)
			i += n
		case c == '\\':
			if i+1 == len(g) {
				return "", "", false, false
			}
			b.WriteString(regexp.QuoteMeta(g[i+1 : i+2]))
			l.WriteByte(g[i+1])
			i += 2
		default:
			b.WriteString(regexp.QuoteMeta(g[i : i+1]))
			l.WriteByte(c)
			i++
		}
	}
	b.WriteString("$")
	return b.String(), l.String(), isLit, true
}

// class translates a bracket expression at the start of s, returning the
// regexp class and the bytes consumed.
func class(s string) (string, int, bool) {
	i := 1
	var b strings.Builder
	b.WriteByte('[')
	if i < len(s) && (s[i] == '!' || s[i] == '^') {
		b.WriteString("^/")
		i++
	}
	first := true
	for i < len(s) {
		c := s[i]
		switch {
		case c == ']' && !first:
			b.WriteByte(']')
			return b.String(), i + 1, true
		case c == '[' && strings.HasPrefix(s[i:], "[:"):
			end := strings.Index(s[i+2:], ":]")
			if end < 0 {
				b.WriteString(`\[`)
				i++
			} else {
				b.WriteString(s[i : i+2+end+2])
				i += 2 + end + 2
			}
		case c == '\\' && i+1 < len(s):
			b.WriteString(regexp.QuoteMeta(s[i+1 : i+2]))
			i += 2
		case c == '-' && !first && i+1 < len(s) && s[i+1] != ']':
			b.WriteByte('-')
			i++
		default:
			if c == '\\' || c == '[' || c == ']' || c == '^' || c == '-' {
				b.WriteByte('\\')
			}
			b.WriteByte(c)
			i++
		}
		first = false
	}
	return "", 0, false
}

// Match reports, for rel (slash-separated, relative to the .gitignore's
// directory), whether some pattern matched and, if so, whether the path is
// ignored (the last matching pattern is not negated).
func (m *Matcher) Match(rel string, isDir bool) (ignored, matched bool) {
	if m == nil {
		return false, false
	}
	base := path.Base(rel)
	for i := len(m.patterns) - 1; i >= 0; i-- {
		p := &m.patterns[i]
		if p.dirOnly && !isDir {
			continue
		}
		s := rel
		if p.basename {
			s = base
		}
		var hit bool
		if p.isLit {
			hit = s == p.literal
		} else {
			hit = p.re.MatchString(s)
		}
		if hit {
			return !p.negate, true
		}
	}
	return false, false
}

// Stack is the .gitignore files in effect in a directory: one per
// directory from the top of the walk down, each with its directory.
type Stack struct {
	dir    string // slash-separated, relative to the walk's top; "" for the top
	m      *Matcher
	parent *Stack
}

// Push returns a stack with m, the .gitignore of dir (relative to the top
// of the walk, slash-separated, "" or "." for the top), on top of s. A nil
// or empty m returns s.
func (s *Stack) Push(dir string, m *Matcher) *Stack {
	if m == nil || m.Len() == 0 {
		return s
	}
	if dir == "." {
		dir = ""
	}
	return &Stack{dir: dir, m: m, parent: s}
}

// Ignored reports whether rel (relative to the top of the walk,
// slash-separated) is ignored: the deepest .gitignore with a matching
// pattern decides.
func (s *Stack) Ignored(rel string, isDir bool) bool {
	for e := s; e != nil; e = e.parent {
		r := rel
		if e.dir != "" {
			if !strings.HasPrefix(rel, e.dir+"/") {
				continue
			}
			r = rel[len(e.dir)+1:]
		}
		if ign, ok := e.m.Match(r, isDir); ok {
			return ign
		}
	}
	return false
}
