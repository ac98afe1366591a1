package builtin

import "github.com/toolgate/toolgate/pkg/textdiff"

// unifiedDiff returns the unified diff (diff -u style, ctx lines of
// context) turning a into b, both named name, or "" when they are equal.
func unifiedDiff(name, a, b string, ctx int) string {
	return textdiff.Unified(name, name, a, b, ctx)
}
