package builtin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"regexp/syntax"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/workspace"
)

// Output modes of grep.
const (
	modeContent = "content"
	modeFiles   = "files_with_matches"
	modeCount   = "count"
)

// fileTypes maps grep's type filter to file name globs (a subset of
// ripgrep's --type list).
var fileTypes = map[string][]string{
	"asm":      {"*.s", "*.S", "*.asm"},
	"c":        {"*.c", "*.h"},
	"cpp":      {"*.cpp", "*.cc", "*.cxx", "*.hpp", "*.hh", "*.hxx", "*.h", "*.inl"},
	"cs":       {"*.cs"},
	"css":      {"*.css", "*.scss", "*.sass", "*.less"},
	"docker":   {"Dockerfile", "*.dockerfile", "Dockerfile.*"},
	"go":       {"*.go"},
	"html":     {"*.html", "*.htm", "*.xhtml"},
	"java":     {"*.java"},
	"js":       {"*.js", "*.mjs", "*.cjs", "*.jsx"},
	"json":     {"*.json", "*.jsonl"},
	"kotlin":   {"*.kt", "*.kts"},
	"make":     {"Makefile", "makefile", "GNUmakefile", "*.mk", "*.mak"},
	"markdown": {"*.md", "*.markdown", "*.mdx"},
	"md":       {"*.md", "*.markdown", "*.mdx"},
	"php":      {"*.php"},
	"proto":    {"*.proto"},
	"py":       {"*.py", "*.pyi"},
	"ruby":     {"*.rb", "Gemfile", "Rakefile"},
	"rust":     {"*.rs"},
	"sh":       {"*.sh", "*.bash", "*.zsh", ".bashrc", ".profile"},
	"sql":      {"*.sql"},
	"swift":    {"*.swift"},
	"toml":     {"*.toml"},
	"ts":       {"*.ts", "*.tsx", "*.mts", "*.cts"},
	"txt":      {"*.txt"},
	"xml":      {"*.xml", "*.xsd", "*.xsl"},
	"yaml":     {"*.yaml", "*.yml"},
}

func typeNames() []string {
	var names []string
	for k := range fileTypes {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

func (s *set) grepTool() *tools.Tool {
	return &tools.Tool{
		Name:    "grep",
		Aliases: []string{"search_files"},
		Description: "Search file contents with a regular expression (RE2 syntax, as Go's regexp) or a fixed string, without a shell. " +
			"output_mode: files_with_matches (default; the paths), content (matching lines as path:line:text, with -A/-B/-C context lines as path-line-text), or count (path:matching lines). " +
			"Filters: glob (e.g. \"*.go\", \"!*_test.go\", \"src/**/*.{ts,tsx}\") and type (" + strings.Join(typeNames(), ", ") + "). " +
			"Honours .gitignore, skips hidden and binary files; offset and head_limit page through the entries. No match is an empty result, not an error.",
		Parameters: schema(props{
			"pattern":          strProp("Regular expression (RE2) to search for, or a fixed string when fixed_string is true."),
			"path":             strProp("File or directory to search: relative to the workspace (default: the workspace), or absolute inside an allowed root."),
			"glob":             strProp("Only search files matching this glob (basename when it has no '/', else the path relative to path); a leading '!' excludes."),
			"type":             map[string]any{"type": "string", "enum": typeNames(), "description": "Only search files of this type."},
			"output_mode":      map[string]any{"type": "string", "enum": []string{modeContent, modeFiles, modeCount}, "description": "What to return; default files_with_matches."},
			"case_insensitive": boolProp("Match case-insensitively."),
			"-i":               boolProp("Same as case_insensitive."),
			"fixed_string":     boolProp("Treat pattern as a literal string, not a regular expression."),
			"-A":               intProp("Lines of context after each match (content mode).", 0),
			"-B":               intProp("Lines of context before each match (content mode).", 0),
			"-C":               intProp("Lines of context before and after each match (content mode).", 0),
			"context_after":    intProp("Same as -A.", 0),
			"context_before":   intProp("Same as -B.", 0),
			"context":          intProp("Same as -C.", 0),
			"-n":               boolProp("Show line numbers in content mode (default true)."),
			"offset":           intProp("Skip this many entries (lines in content mode, files otherwise) before returning any.", 0),
			"head_limit":       intProp("Return at most this many entries after offset (0 means no limit).", 0),
			"hidden":           boolProp("Search files and directories whose name starts with '.'."),
			"no_ignore":        boolProp("Do not honour .gitignore files."),
		}, "pattern"),
		Kind:           policy.KindSearch,
		DefaultTimeout: 60 * time.Second,
		MaxTimeout:     300 * time.Second,
		Annotations:    tools.Annotations{ReadOnly: true, Idempotent: true},
		Handler:        tools.HandlerFunc(s.grep),
	}
}

// grepOptions is one grep search, as the tool's arguments say it.
type grepOptions struct {
	pattern       string
	fixed, icase  bool
	mode          string
	before, after int
	lineNumbers   bool
	globs         []globFilter
	types         []string
	maxSize       int64
	maxLine       int
	maxStored     int // bytes of content lines kept before giving up on more
	// progress, when set, is told how far the search got (files
	// searched, files matched) every grepProgressFiles files.
	progress func(stream, chunk string)
}

// grepProgressFiles is how many files a search reports progress after;
// the pipeline bounds how often it is sent.
const grepProgressFiles = 1000

type globFilter struct {
	pattern  string
	negate   bool
	basename bool
}

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

// fileResult is what one file gave.
type fileResult struct {
	seq     int
	path    string
	count   int
	lines   []string // content mode: formatted output lines, "--" between groups
	binary  bool
	skipped string // why the file was not searched, if it was not
}

func (s *set) grep(ctx context.Context, c *tools.Call) (*tools.Output, error) {
	o := grepOptions{mode: modeFiles, lineNumbers: true, maxSize: s.cfg.MaxReadSize, maxLine: s.cfg.MaxLineLength, maxStored: 16 << 20,
		progress: c.Progress}
	o.pattern, _ = argString(c.Args, "pattern")
	base, _ := argString(c.Args, "path")
	if base == "" {
		base = "."
	}
	o.fixed = argBool(c.Args, "fixed_string")
	o.icase = argBool(c.Args, "case_insensitive", "-i")
	if m, ok := argString(c.Args, "output_mode"); ok && m != "" {
		o.mode = m
	}
	if n, ok := argInt(c.Args, "-C", "context"); ok {
		o.before, o.after = int(n), int(n)
	}
	if n, ok := argInt(c.Args, "-B", "context_before"); ok {
		o.before = int(n)
	}
	if n, ok := argInt(c.Args, "-A", "context_after"); ok {
		o.after = int(n)
	}
	if v, ok := c.Args["-n"].(bool); ok {
		o.lineNumbers = v
	}
	offset, _ := argInt(c.Args, "offset")
	headLimit, _ := argInt(c.Args, "head_limit")
	if m := policyMaxResults(c, 0); m > 0 && (headLimit == 0 || m < headLimit) {
		headLimit = m // the policy's max_results bounds every search
	}
	if g, ok := argString(c.Args, "glob"); ok && g != "" {
		f := globFilter{pattern: g}
		if strings.HasPrefix(g, "!") {
			f.negate, f.pattern = true, g[1:]
		}
		f.basename = !strings.Contains(f.pattern, "/")
		if !doublestar.ValidatePattern(f.pattern) {
			return failf("grep: glob %q is not a valid pattern", g), nil
		}
		o.globs = append(o.globs, f)
	}
	if t, ok := argString(c.Args, "type"); ok && t != "" {
		globs, known := fileTypes[t]
		if !known {
			return failf("grep: unknown type %q; known types: %s", t, strings.Join(typeNames(), ", ")), nil
		}
		o.types = globs
	}
	m, err := newMatcher(o.pattern, o.fixed, o.icase)
	if err != nil {
		return failf("grep: invalid regular expression %q: %v", o.pattern, err), nil
	}
	opts := workspace.WalkOptions{Hidden: argBool(c.Args, "hidden"), NoIgnore: argBool(c.Args, "no_ignore")}

	results, top, stats, err := s.search(ctx, base, opts, c.CheckPath, m, &o)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var pe *tools.PolicyError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("grep %s: %w", base, err)
		}
		return fileFailure("grep", base, err)
	}
	// Entries in path order, then offset and head_limit.
	var entries []string
	matchedFiles, matchedLines := 0, 0
	for _, r := range results {
		if r.count == 0 {
			continue
		}
		matchedFiles++
		matchedLines += r.count
		switch o.mode {
		case modeFiles:
			entries = append(entries, r.path)
		case modeCount:
			entries = append(entries, r.path+":"+strconv.Itoa(r.count))
		case modeContent:
			if len(entries) > 0 && (o.before > 0 || o.after > 0) {
				entries = append(entries, "--")
			}
			entries = append(entries, r.lines...)
		}
	}
	totalEntries := len(entries)
	if offset > 0 {
		entries = entries[min(int(offset), len(entries)):]
	}
	limited := false
	if headLimit > 0 && int64(len(entries)) > headLimit {
		entries, limited = entries[:headLimit], true
	}
	var b strings.Builder
	for _, e := range entries {
		b.WriteString(e)
		b.WriteByte('\n')
	}
	if limited {
		fmt.Fprintf(&b, "(head_limit reached: entries %d-%d of %d shown; continue with offset=%d)\n", offset+1, offset+int64(len(entries)), totalEntries, offset+int64(len(entries)))
	}
	meta := map[string]any{
		"path":           s.display(top.Real),
		"output_mode":    o.mode,
		"matched_files":  matchedFiles,
		"matched_lines":  matchedLines,
		"files_searched": stats.searched,
		"entries":        len(entries),
		"total_entries":  totalEntries,
		"truncated":      limited || stats.storedFull,
	}
	if limited {
		meta["next_offset"] = offset + int64(len(entries))
	}
	for k, v := range map[string]int{"skipped_binary": stats.binary, "skipped_large": stats.large, "skipped_denied": stats.denied, "skipped_unreadable": stats.unreadable} {
		if v > 0 {
			meta[k] = v
		}
	}
	if matchedFiles == 0 {
		b.WriteString("No matches.\n")
	}
	return &tools.Output{Content: b.String(), Metadata: meta}, nil
}

type searchStats struct {
	searched, binary, large, denied, unreadable int
	storedFull                                  bool
}

type grepJob struct {
	seq  int
	path string
	f    io.ReadCloser
	size int64
}

// search walks base and searches the files on GOMAXPROCS workers; results
// come back in walk (path) order.
func (s *set) search(ctx context.Context, base string, opts workspace.WalkOptions, check workspace.Checker, m *matcher, o *grepOptions) ([]*fileResult, workspace.WalkTop, searchStats, error) {
	var st searchStats
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan grepJob, 64)
	var (
		mu      sync.Mutex
		results []*fileResult
		stored  int
		wg      sync.WaitGroup
	)
	workers := max(1, runtime.GOMAXPROCS(0))
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for j := range jobs {
				if ctx.Err() != nil {
					j.f.Close()
					continue
				}
				var r *fileResult
				r, buf = s.searchFile(j, buf, m, o)
				j.f.Close()
				if r == nil {
					continue
				}
				mu.Lock()
				if r.binary && r.count == 0 {
					st.binary++
				}
				if r.skipped != "" {
					st.unreadable++
				} else {
					st.searched++
				}
				if r.count > 0 {
					n := 0
					for _, l := range r.lines {
						n += len(l)
					}
					if stored+n > o.maxStored {
						r.lines = nil
						st.storedFull = true
					}
					stored += n
					results = append(results, r)
				}
				note := ""
				if o.progress != nil && r.skipped == "" && st.searched%grepProgressFiles == 0 {
					note = fmt.Sprintf("searched %d files, %d with matches\n", st.searched, len(results))
				}
				mu.Unlock()
				if note != "" {
					o.progress(tools.StreamStatus, note)
				}
			}
		}()
	}
	seq := 0
	top, err := s.ws.Walk(ctx, base, opts, check, func(e *workspace.Entry) error {
		if !o.wants(e.Rel) {
			return nil
		}
		if check != nil && check(e.Real()) != nil {
			mu.Lock()
			st.denied++
			mu.Unlock()
			return nil
		}
		f, fi, err := e.Open()
		if err != nil {
			mu.Lock()
			st.unreadable++
			mu.Unlock()
			return nil
		}
		if check != nil && workspace.Links(fi) > 1 {
			f.Close()
			mu.Lock()
			st.denied++
			mu.Unlock()
			return nil
		}
		if o.maxSize > 0 && fi.Size() > o.maxSize {
			f.Close()
			mu.Lock()
			st.large++
			mu.Unlock()
			return nil
		}
		seq++
		select {
		case jobs <- grepJob{seq: seq, path: s.display(e.Real()), f: f, size: fi.Size()}:
			return nil
		case <-ctx.Done():
			f.Close()
			return ctx.Err()
		}
	})
	close(jobs)
	wg.Wait()
	if err != nil {
		return nil, top, st, err
	}
	slices.SortFunc(results, func(a, b *fileResult) int { return a.seq - b.seq })
	return results, top, st, nil
}

// wants applies the glob and type filters to a path relative to the top.
func (o *grepOptions) wants(rel string) bool {
	name := path.Base(rel)
	for _, g := range o.globs {
		subject := rel
		if g.basename {
			subject = name
		}
		if doublestar.MatchUnvalidated(g.pattern, subject) == g.negate {
			return false
		}
	}
	if len(o.types) > 0 {
		for _, t := range o.types {
			if ok, _ := path.Match(t, name); ok {
				return true
			}
		}
		return false
	}
	return true
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

// contentLines formats the matching lines of data, with context.
func (s *set) contentLines(r *fileResult, data []byte, m *matcher, o *grepOptions) {
	type span struct{ start, end int }
	var hits []span
	for pos := 0; ; {
		start, end, ok := m.next(data, pos)
		if !ok {
			break
		}
		hits = append(hits, span{start, end})
		pos = end + 1
	}
	r.count = len(hits)
	if len(hits) == 0 {
		return
	}
	format := func(num int, sep byte, line []byte) string {
		text, _ := clipLine(line, o.maxLine)
		if o.lineNumbers {
			return r.path + string(sep) + strconv.Itoa(num) + string(sep) + text
		}
		return r.path + string(sep) + text
	}
	if o.before == 0 && o.after == 0 {
		lineNo, last := 1, 0
		for _, h := range hits {
			lineNo += bytes.Count(data[last:h.start], []byte{'\n'})
			last = h.start
			r.lines = append(r.lines, format(lineNo, ':', data[h.start:h.end]))
		}
		return
	}
	// With context: index every line start.
	starts := []int{0}
	for i, c := range data {
		if c == '\n' && i+1 < len(data) {
			starts = append(starts, i+1)
		}
	}
	lineOf := func(off int) int { // 0-based
		return sort.Search(len(starts), func(i int) bool { return starts[i] > off }) - 1
	}
	lineText := func(i int) []byte {
		end := len(data)
		if i+1 < len(starts) {
			end = starts[i+1] - 1
		}
		return bytes.TrimSuffix(data[starts[i]:end], []byte{'\n'})
	}
	isHit := make(map[int]bool, len(hits))
	for _, h := range hits {
		isHit[lineOf(h.start)] = true
	}
	printed := -1
	for _, h := range hits {
		n := lineOf(h.start)
		from := max(n-o.before, printed+1, 0)
		if printed >= 0 && from > printed+1 {
			r.lines = append(r.lines, "--")
		}
		to := min(n+o.after, len(starts)-1)
		for i := from; i <= to; i++ {
			sep := byte('-')
			if isHit[i] {
				sep = ':'
			}
			r.lines = append(r.lines, format(i+1, sep, lineText(i)))
		}
		printed = max(printed, to)
	}
}
