package builtin

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tooldef"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/workspace"
)

func (s *set) lsTool() *tools.Tool {
	return &tools.Tool{
		Name:    tooldef.Ls.Name,
		Aliases: slices.Clone(tooldef.Ls.Aliases),
		Description: "List a directory of the workspace: one entry per line with its type (file, dir, symlink, ...), " +
			"size in bytes and modification time (UTC), sorted by name. Hidden entries (names starting with '.') only when hidden is true. " +
			"At most limit entries (default " + strconv.Itoa(s.cfg.ListLimit) + "); truncated says when there were more.",
		Parameters:     tooldef.Ls.MustSchema(nil),
		Kind:           policy.Kind(tooldef.Ls.Kind),
		Pure:           tooldef.Ls.Pure,
		DefaultTimeout: 30 * time.Second,
		MaxTimeout:     120 * time.Second,
		Annotations:    tools.Annotations{ReadOnly: true, Idempotent: true},
		Handler:        tools.HandlerFunc(s.ls),
	}
}

type lsEntry struct {
	name, kind, target string
	size               int64
	mtime              time.Time
}

func (s *set) ls(ctx context.Context, c *tools.Call) (*tools.Output, error) {
	path := tools.ArgString(c.Args, "path")
	if path == "" {
		path = "."
	}
	hidden := tools.ArgBool(c.Args, "hidden")
	limit := int64(s.cfg.ListLimit)
	if n, ok := tools.ArgInt(c.Args, "limit"); ok {
		limit = n
	}
	d, err := s.ws.OpenDir(path, c.CheckPath)
	if err != nil {
		return fileFailure("ls", path, err)
	}
	defer d.Close()
	des, err := d.ReadDir()
	if err != nil && len(des) == 0 {
		return fileFailure("ls", path, err)
	}
	var entries []lsEntry
	for i, de := range des {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		name := de.Name()
		if !hidden && strings.HasPrefix(name, ".") {
			continue
		}
		e := lsEntry{name: name, kind: kindOf(de.Type()), size: -1}
		if fi, err := d.Lstat(name); err == nil {
			e.kind = kindOf(fi.Mode())
			e.mtime = fi.ModTime()
			if fi.Mode().IsRegular() {
				e.size = fi.Size()
			}
		}
		if e.kind == "symlink" {
			if t, err := d.Readlink(name); err == nil {
				e.target = t
			}
		}
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b lsEntry) int { return strings.Compare(a.name, b.name) })
	total := len(entries)
	truncated := int64(total) > limit
	if truncated {
		entries = entries[:limit]
	}
	shown := s.display(d.Real)
	var b strings.Builder
	if total == 0 {
		fmt.Fprintf(&b, "%s is empty", shown)
		if !hidden {
			b.WriteString(" (hidden entries not shown; set hidden to include them)")
		}
		b.WriteString(".\n")
	}
	for _, e := range entries {
		size := "-"
		if e.size >= 0 {
			size = strconv.FormatInt(e.size, 10)
		}
		mtime := "-"
		if !e.mtime.IsZero() {
			mtime = fmtTime(e.mtime)
		}
		name := workspace.QuoteName(e.name)
		if e.kind == "dir" {
			name += "/"
		}
		fmt.Fprintf(&b, "%-7s %12s  %s  %s", e.kind, size, mtime, name)
		if e.target != "" {
			fmt.Fprintf(&b, " -> %s", workspace.QuoteName(e.target))
		}
		b.WriteByte('\n')
	}
	if truncated {
		fmt.Fprintf(&b, "(%d of %d entries shown; raise limit to see more)\n", len(entries), total)
	}
	return &tools.Output{Content: b.String(), Metadata: map[string]any{
		"path":      shown,
		"count":     len(entries),
		"total":     total,
		"truncated": truncated,
	}}, nil
}

// kindOf names a file type for ls.
func kindOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "dir"
	case m.IsRegular():
		return "file"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return strings.ReplaceAll(workspace.TypeName(m), " ", "_")
}
