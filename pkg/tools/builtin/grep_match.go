package builtin

import (
	"bytes"
	"errors"
	"io"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode/utf8"
)

// matcher finds matching lines in a buffer.
type matcher struct {
	re      *regexp.Regexp // multi-line mode: ^ and $ match at line ends
	literal []byte         // a plain string to find, when the pattern is one
	fold    bool           // literal is lower-case ASCII, matched ignoring ASCII case
	rare    int            // index in literal of its least common byte
}

func newMatcher(pattern string, fixed, icase bool) (*matcher, error) {
	if fixed && strings.Contains(pattern, "\n") {
		return nil, errors.New("the pattern holds a newline; grep matches within one line")
	}
	expr := pattern
	if fixed {
		expr = regexp.QuoteMeta(pattern)
	}
	flags := "(?m)"
	if icase {
		flags = "(?mi)"
	}
	re, err := regexp.Compile(flags + expr)
	if err != nil {
		return nil, err
	}
	m := &matcher{re: re}
	// A pattern that is a plain string (whatever its spelling: fixed,
	// escaped or with (?i)) is searched for directly.
	if st, err := syntax.Parse(flags+expr, syntax.Perl); err == nil {
		st = st.Simplify()
		if st.Op == syntax.OpLiteral && len(st.Rune) > 0 {
			lit := string(st.Rune)
			switch {
			case strings.Contains(lit, "\n"):
			case st.Flags&syntax.FoldCase == 0:
				m.literal = []byte(lit)
			case isASCII(lit):
				m.literal, m.fold = []byte(strings.ToLower(lit)), true
			}
		}
	}
	if m.literal != nil {
		m.rare = rarest(m.literal)
	}
	return m, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// commonBytes ranks bytes frequent in source code and prose; a byte not
// listed is taken as rare.
const commonBytes = " etaoinsrlcdhupmfgb.,;()_=\"\t\nyvwk{}0123456789-/*:xTESAIRNOLC"

// rarest returns the index of the byte of lit least likely in text.
func rarest(lit []byte) int {
	best, bestRank := 0, -1
	for i, c := range lit {
		rank := strings.IndexByte(commonBytes, c) // later in the list is rarer
		if rank < 0 {
			rank = len(commonBytes)
		}
		if rank > bestRank {
			best, bestRank = i, rank
		}
	}
	return best
}

// foldSensitive are the UTF-8 forms of the non-ASCII letters that Unicode
// folds onto ASCII ones (KELVIN SIGN to k, LONG S to s); a buffer holding
// one is searched with the regular expression instead of the ASCII fold.
var foldSensitive = [][]byte{[]byte("\u212a"), []byte("\u017f")}

// index returns the offset of the first occurrence of the literal in
// buf, or -1. Folded candidates come from the literal's rarest byte.
func (m *matcher) index(buf []byte) int {
	if !m.fold {
		return bytes.Index(buf, m.literal) // vectorised: faster than any byte heuristic
	}
	lit, r := m.literal, m.rare
	n := len(lit)
	c := lit[r]
	pos := 0
	for {
		if pos+n > len(buf) {
			return -1
		}
		var i int
		if m.fold && c >= 'a' && c <= 'z' {
			i = indexEitherByte(buf[pos+r:], c, c-'a'+'A')
		} else {
			i = bytes.IndexByte(buf[pos+r:], c)
		}
		if i < 0 {
			return -1
		}
		start := pos + i
		if start+n > len(buf) {
			return -1
		}
		if m.fold {
			if asciiEqualFold(buf[start:start+n], lit) {
				return start
			}
		} else if bytes.Equal(buf[start:start+n], lit) {
			return start
		}
		pos = start + 1
	}
}

func indexEitherByte(b []byte, lower, upper byte) int {
	i := bytes.IndexByte(b, lower)
	if i < 0 {
		return bytes.IndexByte(b, upper)
	}
	if j := bytes.IndexByte(b[:i], upper); j >= 0 {
		return j
	}
	return i
}

// asciiEqualFold compares b with lower-case ASCII lit, ignoring case.
func asciiEqualFold(b, lit []byte) bool {
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lit[i] {
			return false
		}
	}
	return true
}

// forBuffer returns the matcher to use on buf: the regular expression when
// an ASCII case fold could miss what Unicode folding matches.
func (m *matcher) forBuffer(buf []byte) *matcher {
	if m.fold {
		for _, f := range foldSensitive {
			if bytes.Contains(buf, f) {
				return &matcher{re: m.re}
			}
		}
	}
	return m
}

// next returns the bounds of the next line of buf at or after pos that
// holds a match, or ok false. A match must lie within one line.
func (m *matcher) next(buf []byte, pos int) (start, end int, ok bool) {
	for pos <= len(buf) {
		var at int
		if m.literal != nil {
			i := m.index(buf[pos:])
			if i < 0 {
				return 0, 0, false
			}
			at = pos + i
		} else {
			loc := m.re.FindIndex(buf[pos:])
			if loc == nil {
				return 0, 0, false
			}
			at = pos + loc[0]
		}
		start = bytes.LastIndexByte(buf[:at], '\n') + 1
		end = len(buf)
		if i := bytes.IndexByte(buf[at:], '\n'); i >= 0 {
			end = at + i
		}
		if m.literal != nil || m.re.Match(buf[start:end]) {
			return start, end, true
		}
		// The match ran across a line end; no match lies within this line.
		pos = end + 1
	}
	return 0, 0, false
}

// binaryBlock is the unit in which a binary file's text is searched.
const binaryBlock = 64 << 10

// searchFile reads one file into buf (reused across files) and searches
// it. A file with a NUL byte is binary: its search stops before the 64 KiB
// block holding the first NUL, so a binary file with a NUL near its start
// is skipped whole.
func (s *set) searchFile(j grepJob, buf []byte, m *matcher, o *grepOptions) (*fileResult, []byte) {
	r := &fileResult{seq: j.seq, path: j.path}
	need := int(j.size) + 1
	if cap(buf) < need {
		buf = make([]byte, 0, need+need/4)
	}
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, len(buf)/2+4096)
		}
		n, err := j.f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF || (err == nil && int64(len(buf)) == j.size && j.size > 0 && n > 0 && len(buf) < cap(buf)) {
			// Read to the size fstat gave: done, without one more read(2)
			// to hear EOF (a file growing meanwhile is searched as it was).
			break
		}
		if err != nil {
			r.skipped = err.Error()
			return r, buf
		}
		if o.maxSize > 0 && int64(len(buf)) > o.maxSize {
			r.skipped = "grew past the size limit"
			return r, buf
		}
	}
	data := buf
	if i := bytes.IndexByte(data, 0); i >= 0 {
		// Binary: like ripgrep, which reads 64 KiB at a time and stops at
		// the first block holding a NUL without searching it, search only
		// the whole lines before that block.
		r.binary = true
		block := i / binaryBlock * binaryBlock
		data = data[:bytes.LastIndexByte(data[:block], '\n')+1]
	}
	m = m.forBuffer(data)
	switch o.mode {
	case modeFiles:
		if _, _, ok := m.next(data, 0); ok {
			r.count = 1
		}
	case modeCount:
		for pos := 0; ; {
			_, end, ok := m.next(data, pos)
			if !ok {
				break
			}
			r.count++
			pos = end + 1
		}
	default:
		s.contentLines(r, data, m, o)
	}
	return r, buf
}
