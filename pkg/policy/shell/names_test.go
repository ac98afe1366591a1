package shell

import (
	"strings"
	"testing"
)

// TestNameArgs: the words each builtin evaluates as variable names, as
// bash's own option parsing finds them.
func TestNameArgs(t *testing.T) {
	for _, tc := range []struct {
		argv  string
		names string
		arith string
	}{
		{"printf -v a[1] x", "a[1]", ""},
		{"printf -va[1] x", "a[1]", ""},
		{"printf -- -v a[1]", "", ""},
		{"printf %s a[1]", "", ""},
		{"read -r a b", "a b", ""},
		{"read -ra arr", "arr", ""},
		{"read -p prompt -t 5 x", "x", ""},
		{"read -d , -a arr x", "arr x", ""},
		{"mapfile -t -C cb -c 1 arr", "arr", ""},
		{"wait -n -p pid", "pid", ""},
		{"getopts ab opt -a", "opt", ""},
		{"test -v a[1]", "a[1]", ""},
		{"[ ! -R ref ]", "ref", ""},
		{"test -e a[1]", "", ""},
		{"unset -v a b", "a b", ""},
		{"declare -a x=1 y", "x y", ""},
		{"let x=a[1] y++", "", "x=a[1] y++"},
	} {
		args := words(tc.argv)
		names, arith := nameArgs(args[0].Value, args)
		join := func(ws []Word) string {
			var out []string
			for _, w := range ws {
				out = append(out, w.Value)
			}
			return strings.Join(out, " ")
		}
		if got := join(names); got != tc.names {
			t.Errorf("%s: names %q, want %q", tc.argv, got, tc.names)
		}
		if got := join(arith); got != tc.arith {
			t.Errorf("%s: arithmetic %q, want %q", tc.argv, got, tc.arith)
		}
	}
}
