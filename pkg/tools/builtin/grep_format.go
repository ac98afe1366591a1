package builtin

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/workspace"
)

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

// grepOutput formats the results of a search as output_mode says, in path
// order, paged by offset and head_limit.
func (s *set) grepOutput(results []*fileResult, top workspace.WalkTop, stats searchStats, o *grepOptions) *tools.Output {
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
	if o.offset > 0 {
		entries = entries[min(int(o.offset), len(entries)):]
	}
	limited := false
	if o.headLimit > 0 && int64(len(entries)) > o.headLimit {
		entries, limited = entries[:o.headLimit], true
	}
	var b strings.Builder
	for _, e := range entries {
		b.WriteString(e)
		b.WriteByte('\n')
	}
	if limited {
		fmt.Fprintf(&b, "(head_limit reached: entries %d-%d of %d shown; continue with offset=%d)\n", o.offset+1, o.offset+int64(len(entries)), totalEntries, o.offset+int64(len(entries)))
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
		meta["next_offset"] = o.offset + int64(len(entries))
	}
	for k, v := range map[string]int{"skipped_binary": stats.binary, "skipped_large": stats.large, "skipped_denied": stats.denied, "skipped_unreadable": stats.unreadable} {
		if v > 0 {
			meta[k] = v
		}
	}
	if matchedFiles == 0 {
		b.WriteString("No matches.\n")
	}
	return &tools.Output{Content: b.String(), Metadata: meta}
}
