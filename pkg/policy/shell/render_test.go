package shell

import (
	"strings"
	"testing"
)

// TestRender: what runs is the tree judged, printed back.
func TestRender(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`cat 'main.go' "a b"`, `cat main.go 'a b'`},
		{"ls # note\nls -la", "ls\nls -la"},
		{"# \\\ntouch M", "touch M"},
		{`cat server.pe["m"]`, `cat server.pe["m"]`}, // a glob stays a glob (and asks)
		{`cat '[m]ain.go'`, `cat '[m]ain.go'`},
		{`cat "{a,b}"`, `cat '{a,b}'`},
		{`'a=b' c`, `'a=b' c`},
		{`\time ls`, `'time' ls`},
		{`cat ~/x ~ "~/y"`, `cat ~/x ~ '~/y'`},
		{`echo "it's"`, `echo 'it'\''s'`},
		{`echo "\$HOME" $HOME`, `echo '$HOME' $HOME`},
		{`ls >'out file' 2>&1`, `ls > 'out file' 2>&1`},
		{`find . -exec sh -c 'cat "$1" # x' sh {} \;`, `find . -exec sh -c 'cat "$1"' sh {} ';'`},
		{`sh -c '[[ a > FILE ]]'`, `sh -c ''\''[['\'' a '\'']]'\'' > FILE'`},
		{`bash -c '[[ a > b ]]'`, `bash -c '[[ a > b ]]'`},
		{`watch 'ls  -la'`, `watch 'ls -la'`},
		{"cat <<'EOF'\n$x\nEOF", "cat << 'EOF'\n$x\nEOF"},
		{`for i in a 'b c'; do echo "$i"; done`, `for i in a 'b c'; do echo "$i"; done`},
	} {
		got, err := Render(c.src)
		if err != nil {
			t.Errorf("Render(%q): %v", c.src, err)
			continue
		}
		if got != c.want {
			t.Errorf("Render(%q)\n got %q\nwant %q", c.src, got, c.want)
		}
		if again, err := Render(got); err != nil || again != got {
			t.Errorf("Render(%q) is not a fixed point: %q, %v", got, again, err)
		}
	}
}

// TestQuote: a quoted word reads back as itself.
func TestQuote(t *testing.T) {
	for _, v := range []string{"", "a", "a b", "it's", "$x", "`id`", "a\nb", "~", "-la", "x=y", "{a,b}", "[x]", "*", "\\", "!", "if"} {
		for _, cmd := range []bool{false, true} {
			s, err := Parse("x " + Quote(v, cmd))
			if err != nil || len(s.Commands) != 1 || len(s.Commands[0].Args) != 2 {
				t.Fatalf("Quote(%q) = %q: %v", v, Quote(v, cmd), err)
			}
			if a := s.Commands[0].Args[1]; !a.Literal || a.Value != v || a.Glob || a.Brace || a.Tilde {
				t.Errorf("Quote(%q, %v) = %q reads back as %+v", v, cmd, Quote(v, cmd), a)
			}
		}
	}
}

// FuzzRender: a rendering that parses renders to itself, so that the
// gate's second parse judges the text that runs (one that does not parse
// is denied).
func FuzzRender(f *testing.F) {
	for _, s := range []string{"ls # \\\nsh -c x", "sh -c '[[ a > b ]]'", `cat {"a",b} x["-"]y`, "a=1 b; c | d && e || f &", "find . -exec sh -c 'x' \\;",
		"cat <<EOF\n$x\nEOF\n", "for i in a b; do echo $i; done", `echo 'a'"b"\c $'d\n'`, "jobs -x ls", "watch -n 1 'ls # x'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		if strings.ContainsFunc(src, func(r rune) bool { return r < ' ' && r != '\n' && r != '\t' }) {
			// Control characters other than tab and newline: the
			// printer may print them as blanks, and the gate asks.
			return
		}
		s, err := Parse(src)
		if err != nil {
			return
		}
		s2, err := Parse(s.Rendered)
		if err != nil {
			// The printer does not always print what parses ($`x`
			// becomes $$(x)): the gate denies such a command.
			return
		}
		if s2.Rendered != s.Rendered {
			t.Fatalf("rendering of %q is not a fixed point:\n%q\n%q", src, s.Rendered, s2.Rendered)
		}
	})
}
