package shell

import (
	"errors"
	"testing"
)

// FuzzParse: the analyser never panics, and every error wraps ErrSyntax.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"ls -la | wc", "sh -c 'a; b'", "find . -exec rm {} +", "sed 's/a/b/e'", "x=$((a[$(id)]))", "env A=1 sudo -u x ls"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		s, err := Parse(src)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrSyntax", src, err)
			}
			return
		}
		for _, c := range s.Commands {
			_ = c.Argv()
			if c.Name() != "" && !c.Args[0].Literal {
				t.Fatalf("name of a non-literal word")
			}
		}
	})
}
