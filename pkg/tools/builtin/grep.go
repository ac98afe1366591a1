package builtin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

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
	return s.grepOutput(results, top, stats, &o), nil
}
