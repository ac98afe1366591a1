package builtin

import (
	"container/heap"
	"context"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tooldef"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/workspace"
)

func (s *set) globTool() *tools.Tool {
	return &tools.Tool{
		Name:    tooldef.Glob.Name,
		Aliases: slices.Clone(tooldef.Glob.Aliases),
		Description: "Find files by name pattern with ** for any number of directories (\"**/*.go\", \"src/**/test_*.py\", \"*.{yaml,yml}\"). " +
			"Returns matching regular files, newest first by modification time, at most limit (default " + strconv.Itoa(s.cfg.GlobLimit) + "). " +
			"The pattern is matched against paths relative to path (default: the workspace). Hidden files and files ignored by .gitignore are left out unless hidden or no_ignore is set.",
		Parameters:     tooldef.Glob.MustSchema(nil),
		Kind:           policy.Kind(tooldef.Glob.Kind),
		Pure:           tooldef.Glob.Pure,
		DefaultTimeout: 60 * time.Second,
		MaxTimeout:     300 * time.Second,
		Annotations:    tools.Annotations{ReadOnly: true, Idempotent: true},
		Handler:        tools.HandlerFunc(s.glob),
	}
}

type globHit struct {
	path  string
	mtime time.Time
}

// newestFirst keeps the limit newest hits: a min-heap by (mtime, -path).
type newestFirst []globHit

func (h newestFirst) Len() int { return len(h) }
func (h newestFirst) Less(i, j int) bool {
	if !h[i].mtime.Equal(h[j].mtime) {
		return h[i].mtime.Before(h[j].mtime)
	}
	return h[i].path > h[j].path
}
func (h newestFirst) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *newestFirst) Push(x any)   { *h = append(*h, x.(globHit)) }
func (h *newestFirst) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (s *set) glob(ctx context.Context, c *tools.Call) (*tools.Output, error) {
	pattern := tools.ArgString(c.Args, "pattern")
	base := tools.ArgString(c.Args, "path")
	limit := int64(s.cfg.GlobLimit)
	if n, ok := tools.ArgInt(c.Args, "limit"); ok {
		limit = n
	}
	limit = policyMaxResults(c, limit)
	opts := workspace.WalkOptions{Hidden: tools.ArgBool(c.Args, "hidden"), NoIgnore: tools.ArgBool(c.Args, "no_ignore")}
	if pattern == "" {
		return failf("glob: pattern is empty"), nil
	}
	pattern = filepath.ToSlash(pattern)
	litBase, pat := doublestar.SplitPattern(pattern)
	switch {
	case path.IsAbs(pattern):
		if base != "" {
			return failf("glob: pattern %q is absolute; give either an absolute pattern or path, not both", pattern), nil
		}
		base = litBase
	case litBase != ".":
		if base == "" {
			base = "."
		}
		base = path.Join(filepath.ToSlash(base), litBase)
	}
	if base == "" {
		base = "."
	}
	if !doublestar.ValidatePattern(pat) {
		return failf("glob: %q is not a valid pattern (check brackets and braces)", pattern), nil
	}
	h := &newestFirst{}
	total, denied := 0, 0
	top, err := s.ws.Walk(ctx, base, opts, c.CheckPath, func(e *workspace.Entry) error {
		if !doublestar.MatchUnvalidated(pat, e.Rel) {
			return nil
		}
		real := e.Real()
		if c.CheckPath != nil && c.CheckPath(real) != nil {
			denied++
			return nil
		}
		fi, err := e.Info()
		if err != nil {
			return nil
		}
		total++
		hit := globHit{path: real, mtime: fi.ModTime()}
		if int64(h.Len()) < limit {
			heap.Push(h, hit)
		} else if (*h)[0].mtime.Before(hit.mtime) || ((*h)[0].mtime.Equal(hit.mtime) && (*h)[0].path > hit.path) {
			(*h)[0] = hit
			heap.Fix(h, 0)
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return fileFailure("glob", base, err)
	}
	hits := make([]globHit, h.Len())
	for i := len(hits) - 1; i >= 0; i-- {
		hits[i] = heap.Pop(h).(globHit)
	}
	var b strings.Builder
	for _, hit := range hits {
		b.WriteString(s.display(hit.path))
		b.WriteByte('\n')
	}
	truncated := total > len(hits)
	shownBase := s.display(top.Real)
	if total == 0 {
		fmt.Fprintf(&b, "No files match %s in %s.\n", pattern, shownBase)
	} else if truncated {
		fmt.Fprintf(&b, "(%d of %d matches shown, newest first; narrow the pattern or raise limit)\n", len(hits), total)
	}
	meta := map[string]any{"pattern": pattern, "path": shownBase, "count": len(hits), "total": total, "truncated": truncated}
	if denied > 0 {
		meta["denied"] = denied
	}
	return &tools.Output{Content: b.String(), Metadata: meta}, nil
}
