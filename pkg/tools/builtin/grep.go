package builtin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tooldef"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/workspace"
)

// Output modes of grep.
const (
	modeContent = "content"
	modeFiles   = "files_with_matches"
	modeCount   = "count"
)

func (s *set) grepTool() *tools.Tool {
	return &tools.Tool{
		Name:    tooldef.Grep.Name,
		Aliases: slices.Clone(tooldef.Grep.Aliases),
		Description: "Search file contents with a regular expression (RE2 syntax, as Go's regexp) or a fixed string, without a shell. " +
			"output_mode: files_with_matches (default; the paths), content (matching lines as path:line:text, with -A/-B/-C context lines as path-line-text), or count (path:matching lines). " +
			"Filters: glob (e.g. \"*.go\", \"!*_test.go\", \"src/**/*.{ts,tsx}\") and type (" + strings.Join(typeNames(), ", ") + "). " +
			"Honours .gitignore, skips hidden and binary files; offset and head_limit page through the entries. No match is an empty result, not an error.",
		Parameters: tooldef.Grep.MustSchema(map[string]map[string]any{
			"type":        {"enum": typeNames()},
			"output_mode": {"enum": []string{modeContent, modeFiles, modeCount}},
		}),
		Kind:           policy.Kind(tooldef.Grep.Kind),
		Pure:           tooldef.Grep.Pure,
		DefaultTimeout: 60 * time.Second,
		MaxTimeout:     300 * time.Second,
		Annotations:    tools.Annotations{ReadOnly: true, Idempotent: true},
		Handler:        tools.HandlerFunc(s.grep),
	}
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
	o, base, fail := s.grepArgs(c)
	if fail != nil {
		return fail, nil
	}
	m, err := newMatcher(o.pattern, o.fixed, o.icase)
	if err != nil {
		return failf("grep: invalid regular expression %q: %v", o.pattern, err), nil
	}
	opts := workspace.WalkOptions{Hidden: tools.ArgBool(c.Args, "hidden"), NoIgnore: tools.ArgBool(c.Args, "no_ignore")}

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
	return s.grepOutput(results, top, stats, &o), nil
}
