package shell

import (
	"errors"
	"testing"
)

// FuzzParse: the analyser never panics, and every error wraps ErrSyntax.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"ls -la | wc", "sh -c 'a; b'", "find . -exec rm {} +", "sed 's/a/b/e'", "x=$((a[$(id)]))", "env A=1 sudo -u x ls",
		"tar xf a.tar", "gzip -dS", "xz -S rc -d .npmrc", "patch -p 1 -i", "ar x", "7z x a -o", "unzip -d"} {
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

// FuzzOptionEngine: parsing any argv with any program's table never
// panics, and every word ends up an option, an option's value or an
// operand, in order.
func FuzzOptionEngine(f *testing.F) {
	for _, s := range []string{"--outp=x f", "-rox f", "-- -x", "--s p", "-5nR x .", "--expr 1e\x00id", "-", "--=x", "---"} {
		f.Add(s)
	}
	specs := []*optSpec{sedSpec, sortSpec, grepSpec, rgSpec, gitGlobalSpec, tarSpec, awkSpec, treeSpec}
	f.Fuzz(func(t *testing.T, argv string) {
		args := words(argv)
		for _, s := range specs {
			p := s.parse(args)
			n := len(p.operands)
			for _, o := range p.opts {
				if o.def == nil {
					t.Fatalf("%s %q: option without a definition", s.program, argv)
				}
				if o.hasValue && o.def.arg == argNone {
					t.Fatalf("%s %q: value for %s, which takes none", s.program, argv, o.def.id)
				}
			}
			if n > len(args) {
				t.Fatalf("%s %q: %d operands from %d words", s.program, argv, n, len(args))
			}
		}
	})
}
