package gitignore

import (
	"testing"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		patterns string
		path     string
		dir      bool
		ignored  bool
		matched  bool
	}{
		{"*.log", "a.log", false, true, true},
		{"*.log", "x/y/a.log", false, true, true},
		{"*.log\n!keep.log", "keep.log", false, false, true},
		{"/top", "top", false, true, true},
		{"/top", "x/top", false, false, false},
		{"build/", "build", true, true, true},
		{"build/", "build", false, false, false},
		{"a/**/b", "a/b", false, true, true},
		{"a/**/b", "a/x/y/b", false, true, true},
		{"a/**/b", "xa/b", false, false, false},
		{"**/c", "c", true, true, true},
		{"**/c", "x/y/c", false, true, true},
		{"d/**", "d/x/y", false, true, true},
		{"[!a-c]x", "dx", false, true, true},
		{"[!a-c]x", "ax", false, false, false},
		{"[]]x", "]x", false, true, true},
		{"*x", "a/bx", false, true, true},
		{"a*/x", "ab/x", false, true, true},
		{"a*/x", "a/b/x", false, false, false},
		{`\#h`, "#h", false, true, true},
		{"# comment", "# comment", false, false, false},
		{`\!b`, "!b", false, true, true},
		{"t   ", "t", false, true, true},
		{`s\ `, "s ", false, true, true},
		{"[unclosed", "[unclosed", false, false, false},
		{`bad\`, `bad\`, false, false, false},
		{"f?o", "f/o", false, false, false},
		{"[[:digit:]]x", "7x", false, true, true},
	} {
		m := Parse([]byte(tc.patterns))
		ign, matched := m.Match(tc.path, tc.dir)
		if ign != tc.ignored || matched != tc.matched {
			t.Errorf("%q vs %q (dir %v): ignored %v matched %v, want %v %v", tc.patterns, tc.path, tc.dir, ign, matched, tc.ignored, tc.matched)
		}
	}
}

func TestStackDeepestDecides(t *testing.T) {
	var s *Stack
	s = s.Push("", Parse([]byte("*.txt\n")))
	s = s.Push("sub", Parse([]byte("!keep.txt\n")))
	for _, tc := range []struct {
		path    string
		ignored bool
	}{
		{"a.txt", true}, {"sub/a.txt", true}, {"sub/keep.txt", false}, {"other/keep.txt", true}, {"subx/keep.txt", true},
	} {
		if got := s.Ignored(tc.path, false); got != tc.ignored {
			t.Errorf("%s: ignored %v, want %v", tc.path, got, tc.ignored)
		}
	}
	if (*Stack)(nil).Ignored("x", false) {
		t.Error("nil stack ignores")
	}
}

// FuzzParse: any .gitignore content parses and matches without panicking.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"*.log\n!a.log\n", "a/**/b\n[!x]\n", `\`, "[", "[]", "[!]", "**", "/**/", "[[:alpha:]", "\\ \n"} {
		f.Add(s, "a/b.log")
	}
	f.Fuzz(func(t *testing.T, patterns, path string) {
		m := Parse([]byte(patterns))
		m.Match(path, false)
		m.Match(path, true)
		var s *Stack
		s.Push("d", m).Ignored("d/"+path, false)
	})
}
