package shell

import (
	"strings"
	"testing"
)

func words(s string) []Word {
	var out []Word
	for _, f := range strings.Fields(s) {
		out = append(out, Word{Value: f, Literal: true})
	}
	return out
}

// TestOptionEngine checks the parse against what getopt_long and the
// other parsers do with the same argv.
func TestOptionEngine(t *testing.T) {
	for _, tc := range []struct {
		spec     *optSpec
		args     string
		opts     string // id=value ... in order
		operands string
		problems int
	}{
		{sortSpec, "--outp=x f", "o=x", "f", 0},
		{sortSpec, "--outp x f", "o=x", "f", 0},
		{sortSpec, "-rox f", "r o=x", "f", 0},
		{sortSpec, "-ro x f", "r o=x", "f", 0},
		{sortSpec, "f --output=x", "o=x", "f", 0},
		{sortSpec, "-- --output=x", "", "--output=x", 0},
		{sortSpec, "--compress=sh f", "compress-program=sh", "f", 0},
		{sortSpec, "--ra f", "", "f", 1}, // --random-sort or --random-source
		{sortSpec, "--rev f", "r", "f", 0},
		{sortSpec, "--frobnicate f", "", "f", 1},
		{sortSpec, "-Q f", "", "f", 1},
		{sedSpec, "--expr=1eid f", "e=1eid", "f", 0},
		{sedSpec, "-ne p f", "n e=p", "f", 0},
		{sedSpec, "-i.bak s/a/b/ f", "i=.bak", "s/a/b/ f", 0},
		{sedSpec, "-sie p f", "s i=e", "p f", 0},
		{sedSpec, "--in p f", "i", "p f", 0},
		{sedSpec, "--s p", "", "p", 1}, // --sandbox, --separate, --silent
		{grepSpec, "--der x .", "R", "x .", 0},
		{grepSpec, "-5nR x .", "n R", "x .", 0},
		{grepSpec, "-e x -f/etc/p .", "e=x f=/etc/p", ".", 0},
		{rgSpec, "--pr=sh x", "pre=sh", "x", 0}, // exact parser: a prefix of a dangerous option is judged as it
		{rgSpec, "--unknown x", "", "x", 0},
		{gitGlobalSpec, "-C /etc log -p", "C=/etc", "log -p", 0},
		{gitGlobalSpec, "--exec-path log", "exec-path", "log", 0},
		{gitGlobalSpec, "--bogus log", "", "log", 1},
	} {
		p := tc.spec.parse(words(tc.args))
		var opts []string
		for _, o := range p.opts {
			s := o.def.id
			if o.hasValue {
				s += "=" + o.value.Value
			}
			opts = append(opts, s)
		}
		var ops []string
		for _, o := range p.operands {
			ops = append(ops, o.Value)
		}
		if got := strings.Join(opts, " "); got != tc.opts {
			t.Errorf("%s %s: options %q, want %q", tc.spec.program, tc.args, got, tc.opts)
		}
		if got := strings.Join(ops, " "); got != tc.operands {
			t.Errorf("%s %s: operands %q, want %q", tc.spec.program, tc.args, got, tc.operands)
		}
		if len(p.problems) != tc.problems {
			t.Errorf("%s %s: problems %v, want %d", tc.spec.program, tc.args, p.problems, tc.problems)
		}
	}
}

// TestOptionTablesBuild builds every option table (they are built on
// first use, and a bad definition panics) and checks that each program's
// table is one of them.
func TestOptionTablesBuild(t *testing.T) {
	if len(allSpecs) < len(optionSpecs)/2 {
		t.Fatalf("%d tables made, want at least %d", len(allSpecs), len(optionSpecs)/2)
	}
	made := map[*optSpec]bool{}
	for _, s := range allSpecs {
		if tab := s.table(); len(tab.short)+len(tab.long) == 0 {
			t.Errorf("%s: no options", s.program)
		}
		made[s] = true
	}
	for name, s := range optionSpecs {
		if !made[s] {
			t.Errorf("%s: table not made by spec", name)
		}
	}
	for _, s := range []*optSpec{rmSpec, chmodSpec, gitGlobalSpec} {
		if !made[s] {
			t.Errorf("%s: table not made by spec", s.program)
		}
	}
}

func TestGitObjectID(t *testing.T) {
	for v, want := range map[string]bool{
		"abcd": true, "ABCDEF0123": true, "0123456789abcdef0123456789abcdef01234567": true,
		strings.Repeat("a", 64): true, strings.Repeat("a", 65): false,
		"abc": false, "": false, "abcg": false, "abcd\n": false, "-abcd": false, "HEAD": false,
	} {
		if got := gitObjectID(v); got != want {
			t.Errorf("gitObjectID(%q) = %v, want %v", v, got, want)
		}
	}
}
