package tools

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Truncate bounds s to about max characters (runes) by cutting the middle:
// the head and the tail are kept, cut on line boundaries where a line
// boundary lies near, never inside a UTF-8 sequence, and a marker says how
// many characters were cut. It returns s unchanged and 0 when it fits.
func Truncate(s string, max int) (string, int) {
	n := utf8.RuneCountInString(s)
	if max <= 0 || n <= max {
		return s, 0
	}
	budget := max - 64 // room for the marker
	if budget < 2 {
		budget = max
	}
	headRunes, tailRunes := budget/2, budget-budget/2
	head := runePrefix(s, headRunes)
	tail := runeSuffix(s, tailRunes)
	// Prefer line boundaries when one is within the last/first quarter.
	if i := strings.LastIndexByte(head, '\n'); i >= 0 && i >= len(head)*3/4 {
		head = head[:i+1]
	}
	if i := strings.IndexByte(tail, '\n'); i >= 0 && i <= len(tail)/4 {
		tail = tail[i+1:]
	}
	cut := n - utf8.RuneCountInString(head) - utf8.RuneCountInString(tail)
	return head + Marker(cut) + tail, cut
}

// Marker is the text that stands where Truncate cut characters.
func Marker(cut int) string {
	return fmt.Sprintf("\n... [%d characters truncated] ...\n", cut)
}

func runePrefix(s string, n int) string {
	i := 0
	for n > 0 && i < len(s) {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		n--
	}
	return s[:i]
}

func runeSuffix(s string, n int) string {
	i := len(s)
	for n > 0 && i > 0 {
		_, size := utf8.DecodeLastRuneInString(s[:i])
		i -= size
		n--
	}
	return s[i:]
}
