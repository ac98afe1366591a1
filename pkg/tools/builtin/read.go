package builtin

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tooldef"
	"github.com/toolgate/toolgate/pkg/tools"
)

func (s *set) readTool() *tools.Tool {
	return &tools.Tool{
		Name:    tooldef.Read.Name,
		Aliases: slices.Clone(tooldef.Read.Aliases),
		Description: "Read a text file of the workspace. Lines are numbered from 1 (`cat -n` style). " +
			"By default up to " + strconv.Itoa(s.cfg.ReadLimit) + " lines from the start; choose a window with offset/limit or start_line/end_line. " +
			"A directory is an error (use ls); binary files return a notice instead of bytes; files larger than " +
			strconv.FormatInt(s.cfg.MaxReadSize, 10) + " bytes are refused; lines longer than " + strconv.Itoa(s.cfg.MaxLineLength) + " characters are clipped.",
		Parameters:     tooldef.Read.MustSchema(nil),
		Kind:           policy.Kind(tooldef.Read.Kind),
		Pure:           tooldef.Read.Pure,
		DefaultTimeout: 30 * time.Second,
		MaxTimeout:     120 * time.Second,
		Annotations:    tools.Annotations{ReadOnly: true, Idempotent: true},
		Handler:        tools.HandlerFunc(s.read),
	}
}

func (s *set) read(ctx context.Context, c *tools.Call) (*tools.Output, error) {
	path := tools.ArgString(c.Args, "path")
	offset, hasOffset := tools.ArgInt(c.Args, "offset")
	limit, hasLimit := tools.ArgInt(c.Args, "limit")
	startLine, hasStart := tools.ArgInt(c.Args, "start_line")
	endLine, hasEnd := tools.ArgInt(c.Args, "end_line")
	if (hasOffset || hasLimit) && (hasStart || hasEnd) {
		return failf("read %s: use offset/limit or start_line/end_line, not both", path), nil
	}
	if hasStart && hasEnd && endLine < startLine {
		return failf("read %s: end_line %d is before start_line %d", path, endLine, startLine), nil
	}
	first := int64(1)
	count := int64(s.cfg.ReadLimit)
	switch {
	case hasStart || hasEnd:
		if hasStart {
			first = startLine
		}
		if hasEnd {
			count = endLine - first + 1
		}
	default:
		if hasOffset && offset > 0 {
			first = offset
		}
		if hasLimit {
			count = limit
		}
	}

	data, f, err := s.ws.ReadFile(path, policyMaxBytes(c, s.cfg.MaxReadSize), c.CheckPath)
	if err != nil {
		return fileFailure("read", path, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	shown := s.display(f.Real)
	meta := map[string]any{"path": shown, "size": len(data)}
	if isBinary(data) {
		meta["binary"] = true
		return &tools.Output{
			Content:  fmt.Sprintf("%s is a binary file (%d bytes, %s); its bytes are not shown.", shown, len(data), http.DetectContentType(data)),
			Metadata: meta,
		}, nil
	}
	total := countLines(data)
	meta["total_lines"] = total
	if total == 0 {
		return &tools.Output{Content: fmt.Sprintf("%s is empty.", shown), Metadata: meta}, nil
	}
	if first > int64(total) {
		return &tools.Output{
			IsError:  true,
			Content:  fmt.Sprintf("read %s: line %d is past the end of the file, which has %d %s", shown, first, total, plural(total, "line", "lines")),
			Metadata: meta,
		}, nil
	}
	// Skip to the first line wanted.
	rest := data
	for n := int64(1); n < first; n++ {
		i := bytes.IndexByte(rest, '\n')
		rest = rest[i+1:]
	}
	var b strings.Builder
	budget := s.cfg.MaxOutput - 200 // room for the closing notice
	// The numbered lines take about the data plus 8 bytes a line.
	b.Grow(min(len(rest)+8*int(min(count, int64(total))), budget) + 200)
	line := first
	clipped := 0
	stopped := false
	var num [20]byte
	for ; line < first+count && len(rest) > 0; line++ {
		var l []byte
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			l, rest = rest[:i], rest[i+1:]
		} else {
			l, rest = rest, nil
		}
		text, cut := l, 0
		if len(l) > s.cfg.MaxLineLength { // bytes >= runes: only then can it be too long
			var t string
			t, cut = clipLine(l, s.cfg.MaxLineLength)
			text = []byte(t)
		}
		if cut > 0 {
			clipped++
		}
		// "%6d\t%s\n", without formatting through fmt.
		n := strconv.AppendInt(num[:0], line, 10)
		pad := max(0, 6-len(n))
		if size := pad + len(n) + 1 + len(text) + 1; b.Len() > 0 && b.Len()+size > budget {
			stopped = true
			break
		}
		for range pad {
			b.WriteByte(' ')
		}
		b.Write(n)
		b.WriteByte('\t')
		b.Write(text)
		b.WriteByte('\n')
	}
	last := line - 1
	meta["start_line"] = first
	meta["end_line"] = last
	if clipped > 0 {
		meta["clipped_lines"] = clipped
	}
	if last < int64(total) {
		meta["truncated"] = true
		meta["next_offset"] = last + 1
		reason := "limit reached"
		if stopped {
			reason = "output size limit reached"
		}
		fmt.Fprintf(&b, "\n(%s: showing lines %d-%d of %d; continue with offset=%d)\n", reason, first, last, total, last+1)
	}
	return &tools.Output{Content: b.String(), Metadata: meta}, nil
}

// isBinary reports whether data looks binary: a NUL byte in the first
// 8 KB, or invalid UTF-8.
func isBinary(data []byte) bool {
	head := data[:min(len(data), 8192)]
	if bytes.IndexByte(head, 0) >= 0 {
		return true
	}
	return !utf8.Valid(data)
}

// countLines counts lines: a final line without a newline counts.
func countLines(data []byte) int {
	n := bytes.Count(data, []byte{'\n'})
	if len(data) > 0 && data[len(data)-1] != '\n' {
		n++
	}
	return n
}

// clipLine returns the line as text, clipped to max characters with a
// marker saying how many were cut.
func clipLine(l []byte, max int) (string, int) {
	if len(l) <= max { // bytes >= runes
		return string(l), 0
	}
	n := utf8.RuneCount(l)
	if n <= max {
		return string(l), 0
	}
	i, k := 0, 0
	for k < max {
		_, size := utf8.DecodeRune(l[i:])
		i += size
		k++
	}
	cut := n - max
	return string(l[:i]) + fmt.Sprintf("... [%d characters clipped]", cut), cut
}
