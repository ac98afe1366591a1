// Package textdiff renders unified diffs (diff -u format) of two texts for
// people to read before an edit or write happens. Line matching and hunk
// layout come from github.com/aymanbagabas/go-udiff (the diff of gopls);
// this package only corrects its new-file hunk start lines.
package textdiff

import (
	"fmt"

	udiff "github.com/aymanbagabas/go-udiff"
)

// Unified returns the unified diff turning old into new with ctx lines of
// context, headed by the labels from and to, or "" when the texts are
// equal. A last line without a newline is marked "\ No newline at end of
// file", as diff -u does.
func Unified(from, to, old, new string, ctx int) string {
	if old == new {
		return ""
	}
	u, err := udiff.ToUnifiedDiff(from, to, old, udiff.Lines(old, new), ctx)
	if err != nil {
		// Lines yields sorted, in-range edits, so this is a library bug;
		// the reader must still see that the text changes.
		return fmt.Sprintf("--- %s\n+++ %s\n(diff unavailable: %v)\n", from, to, err)
	}
	// go-udiff does not advance its new-file line counter over the equal
	// lines that join two edits into one hunk, so every later hunk's
	// new-file start is too small (golang/go#81453). A hunk's new-file
	// start is its old-file start moved by the lines added minus the lines
	// removed in the hunks before it.
	shift := 0
	for _, h := range u.Hunks {
		h.ToLine = h.FromLine + shift
		for _, l := range h.Lines {
			switch l.Kind {
			case udiff.Insert:
				shift++
			case udiff.Delete:
				shift--
			}
		}
	}
	return u.String()
}
