package shell

import (
	"errors"
	"strings"
	"testing"
)

func argvs(s *Script) []string {
	out := make([]string, len(s.Commands))
	for i, c := range s.Commands {
		parts := make([]string, len(c.Args))
		for j, w := range c.Args {
			switch {
			case w.Literal:
				parts[j] = w.Value
			case w.ProcSubst:
				parts[j] = "<proc>"
			default:
				parts[j] = "?"
			}
		}
		out[i] = strings.Join(parts, " ")
	}
	return out
}

func TestParseFindsEveryCommand(t *testing.T) {
	tests := []struct {
		src  string
		want []string
	}{
		{"a | b && c; d & e\nf || g", []string{"a", "b", "c", "d", "e", "f", "g"}},
		{"(a); { b; }; f() { c; }; h", []string{"a", "b", "c", "h"}},
		{"x $(a) `b` <(c) >(d)", []string{"a", "b", "c", "d", "x ? ? <proc> <proc>"}},
		{"echo $((1 + $(a)))", []string{"a", "echo ?"}},
		{"if a; then b; elif c; then d; else e; fi", []string{"a", "b", "c", "d", "e"}},
		{"while a; do b; done; until c; do d; done", []string{"a", "b", "c", "d"}},
		{"for x in $(a); do b; done", []string{"a", "b"}},
		{"for ((i=0; i<3; i++)); do a; done", []string{"a"}},
		{"case $(a) in x) b;; *) c;; esac", []string{"a", "b", "c"}},
		{"[[ $(a) == x ]] && b", []string{"a", "b"}},
		{"x=$(a) b", []string{"a", "b"}},
		{"x=$(a)", []string{"a"}},
		{"time a; coproc b; ! c", []string{"a", "b", "c"}},
		{"cat <<EOF\n$(a)\nEOF", []string{"a", "cat"}},
		{"declare x=$(a); export y=`b`; local z=$(c)", []string{"a", "b", "c"}},
		{"a > $(b)", []string{"b", "a"}},
		{"echo ${x:-$(a)} ${y/$(b)/$(c)}", []string{"a", "b", "c", "echo ? ?"}},
		{"env A=1 nice -n 5 timeout -s KILL 3 ls -l", []string{"env A=1 nice -n 5 timeout -s KILL 3 ls -l", "nice -n 5 timeout -s KILL 3 ls -l", "timeout -s KILL 3 ls -l", "ls -l"}},
		{"sh -c 'a; b | c'", []string{"sh -c a; b | c", "a", "b", "c"}},
		{"bash -ec \"sh -c 'a'\"", []string{"bash -ec sh -c 'a'", "sh -c a", "a"}},
		{"find . -name x -exec a {} \\; -execdir b {} + -ok c \\;", []string{"find . -name x -exec a {} ; -execdir b {} + -ok c ;", "a {}", "b {}", "c"}},
		{"xargs -n1 -I{} a {}", []string{"xargs -n1 -I{} a {}", "a {}"}},
		{"command -v ls; command ls; builtin cd x; exec a", []string{"command -v ls", "command ls", "ls", "builtin cd x", "cd x", "exec a", "a"}},
		{"sudo -u root a b", []string{"sudo -u root a b", "a b"}},
		{"busybox a b", []string{"busybox a b", "a b"}},
		{"watch -n 1 'a | b'", []string{"watch -n 1 a | b", "a", "b"}},
		{"eval 'a; b'", []string{"eval a; b", "a", "b"}},
		{"stdbuf -oL setsid nohup a", []string{"stdbuf -oL setsid nohup a", "setsid nohup a", "nohup a", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			s, err := Parse(tt.src)
			if err != nil {
				t.Fatal(err)
			}
			got := argvs(s)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("commands:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestWrappedCommands(t *testing.T) {
	s, err := Parse("env LD_PRELOAD=x.so timeout 3 ls")
	if err != nil {
		t.Fatal(err)
	}
	last := s.Commands[len(s.Commands)-1]
	if strings.Join(last.WrappedBy, ",") != "env,timeout" || len(last.Assigns) != 1 || last.Assigns[0].Name != "LD_PRELOAD" {
		t.Errorf("inner command %+v", last)
	}
	if !hasHazard(last.Hazards, HazardEnv) {
		t.Errorf("LD_PRELOAD through env is not a hazard: %+v", last.Hazards)
	}
	if !s.Commands[0].Wrapper || !s.Commands[1].Wrapper || last.Wrapper {
		t.Errorf("wrapper flags: %v %v %v", s.Commands[0].Wrapper, s.Commands[1].Wrapper, last.Wrapper)
	}
	s, _ = Parse("sh -c 'sh -c ls'")
	if d := s.Commands[len(s.Commands)-1].Depth; d != 2 {
		t.Errorf("depth of the innermost command = %d, want 2", d)
	}
}

func hasHazard(hs []Hazard, k HazardKind) bool {
	for _, h := range hs {
		if h.Kind == k {
			return true
		}
	}
	return false
}

func allHazards(s *Script) []Hazard {
	out := append([]Hazard(nil), s.Hazards...)
	for _, c := range s.Commands {
		out = append(out, c.Hazards...)
	}
	return out
}

func TestHazards(t *testing.T) {
	tests := []struct {
		src  string
		want HazardKind // "" means none
	}{
		{"ls -la", ""},
		{"$x -la", HazardDynamic},
		{"ls $x", HazardExpansion},
		{"ls \"$x\"", HazardExpansion},
		{"ls *.go", HazardGlob},
		{"ls '*.go'", ""},
		{"ls \\*.go", ""},
		{"ls {a,b}", HazardGlob},
		{"ls {}", ""},
		{"ls @(a|b)", HazardGlob},
		{"eval x", HazardEval},
		{"source x", HazardEval},
		{"alias a=b", HazardEval},
		{"trap 'x' EXIT", HazardEval},
		{"shopt -s expand_aliases", HazardEval},
		{"hash -p /tmp/x ls", HazardEval},
		{"mapfile -C cb x", HazardEval},
		{"set -euo pipefail", ""},
		{"set -o emacs", HazardEval},
		{"f() { :; }", HazardFunction},
		{"LD_PRELOAD=x ls", HazardEnv},
		{"LANG=C ls", ""},
		{"PATH=/x", HazardEnv},
		{"x=1; echo done", ""},
		{"export PAGER=evil", HazardEnv},
		{"declare -n r=x", HazardEval},
		{"declare -i n=x", HazardEval},
		{"echo $((x + 1))", HazardArithmetic},
		{"echo $((1 + 2))", HazardExpansion},
		{"(( i++ ))", HazardArithmetic},
		{"let x=1", HazardArithmetic},
		{"[[ $a -lt 3 ]]", HazardArithmetic},
		{"[[ 2 -lt 3 ]]", ""},
		{"echo ${x@P}", HazardEval},
		{"echo ${!x}", HazardEval},
		{"a[$(id)]=1", HazardArithmetic},
		{"bash x.sh", HazardScript},
		{"bash", HazardScript},
		{"bash -s", HazardScript},
		{"fish -c ls", HazardScript},
		{"sed -f x.sed f", HazardScript},
		{"awk -f x.awk f", HazardScript},
		{"env -S 'a b'", HazardScript},
		{"rg --pre=x foo", HazardExec},
		{"rg --hostname-bin=x foo", HazardExec},
		{"fd -x rm", HazardExec},
		{"git -c core.pager=x log", HazardExec},
		{"git --config-env=core.pager=X log", HazardExec},
		{"git diff --ext-diff", HazardExec},
		{"git grep -Ovim x", HazardExec},
		{"git rebase -x make", HazardExec},
		{"git clone -c core.hooksPath=x url", HazardExec},
		{"git log --oneline", ""},
		{"git --git-dir=x log", HazardExec},
		{"git --work-tree /w status", HazardExec},
		{"awk '{print $1 | \"sh\"}'", HazardExec},
		{"awk '@load \"x\"'", HazardExec},
		{"python3 -c 'import os'", HazardExec},
		{"node -e 1", HazardExec},
		{"perl -e 1", HazardExec},
		{"tar --to-command=x -xf a.tar", HazardExec},
		{"less +!id f", HazardExec},
		{"man -P evil ls", HazardExec},
		{"sort --compress-program=x f", HazardExec},
		{"go test -exec=x ./...", HazardExec},
		{"sed 1e f", HazardExec},
		{"sed 's/a/b/e' f", HazardExec},
		{"sed -i s/a/b/ f", HazardWrite},
		{"sed -ibak s/a/b/ f", HazardWrite},
		{"sed 'w out' f", HazardWrite},
		{"sed 's/a/b/w out' f", HazardWrite},
		{"sed -n '/x/p' f", ""},
		{"sed -e 's|a|b|g' -e '1d' f", ""},
		{"sed --sandbox 's/a/b/e' f", ""},
		{"find . -delete", HazardWrite},
		{"find . -fprintf f '%p'", HazardWrite},
		{"sort -o out f", HazardWrite},
		{"uniq in out", HazardWrite},
		{"xxd in out", HazardWrite},
		{"tree -o out", HazardWrite},
		{"awk '{print > \"out\"}' f", HazardWrite},
		{"git diff --output=x", HazardWrite},
		{"go env -w GOFLAGS=-x", HazardWrite},
		{"yq -i .a=1 f.yaml", HazardWrite},
		{"time -o out ls", ""},
		{"sed 'r /etc/passwd' f", HazardRead},
		{"awk '{getline x < \"/etc/passwd\"}'", HazardRead},
		{"git diff --no-index a b", HazardRead},
		{"find -L .", HazardFollow},
		{"find . -follow", HazardFollow},
		{"grep -R x .", HazardFollow},
		{"grep -r x .", ""},
		{"rg -L x", HazardFollow},
		{"tree -l", HazardFollow},
		{"xargs cat", HazardStdinArgs},
		{"date -s tomorrow", HazardSystem},
		{"date +%s", ""},
		{"hostname evil", HazardSystem},
		{"sed 'k' f", HazardUnsupported},
		{"cat <<< \"$(a)\"", ""},
		{"{x}>out ls", HazardExpansion},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			s, err := Parse(tt.src)
			if err != nil {
				t.Fatal(err)
			}
			hs := allHazards(s)
			if tt.want == "" {
				if len(hs) > 0 {
					t.Errorf("unexpected hazards %+v", hs)
				}
				return
			}
			if !hasHazard(hs, tt.want) {
				t.Errorf("hazards %+v, want %s", hs, tt.want)
			}
		})
	}
}

func TestRedirects(t *testing.T) {
	s, err := Parse("a > out 2>&1 < in >> log &> all 3<> rw >&2 <<EOF\nx\nEOF")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range s.Redirects {
		mode := ""
		if r.Read {
			mode += "r"
		}
		if r.Write {
			mode += "w"
		}
		got = append(got, r.Op+" "+r.Target.Value+" "+mode)
	}
	want := []string{"> out w", "< in r", ">> log w", "&> all w", "<> rw rw"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("redirects %q, want %q", got, want)
	}
}

func TestWords(t *testing.T) {
	tests := []struct {
		src   string
		value string
		lit   bool
		tilde bool
	}{
		{`'r'm`, "rm", true, false},
		{`r\m`, "rm", true, false},
		{`"r"m`, "rm", true, false},
		{`"a\"b"`, `a"b`, true, false},
		{`"a\nb"`, `a\nb`, true, false},
		{`$'a'`, "a", true, false},
		{`$'\x41'`, "", false, false},
		{`~/x`, "~/x", true, true},
		{`~`, "~", true, true},
		{`~root/x`, "", false, false},
		{`"~/x"`, "~/x", true, false},
		{`$HOME/x`, "", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			s, err := Parse("cmd " + tt.src)
			if err != nil {
				t.Fatal(err)
			}
			w := s.Commands[0].Args[1]
			if w.Value != tt.value || w.Literal != tt.lit || w.Tilde != tt.tilde {
				t.Errorf("word %+v, want value %q literal %v tilde %v", w, tt.value, tt.lit, tt.tilde)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	deep := "ls"
	for i := 0; i <= MaxDepth; i++ {
		deep = "sh -c '" + strings.ReplaceAll(deep, "'", `'\''`) + "'"
	}
	for _, src := range []string{"ls $(", "echo 'x", "if then fi", "ls \x00", strings.Repeat("a", MaxLen+1),
		deep, "sh -c 'ls $('", "eval 'ls $('", strings.Repeat("a;", MaxCommands+1)} {
		if _, err := Parse(src); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%.40q) error %v, want ErrSyntax", src, err)
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		argv string
		want Class
	}{
		{"ls -la", ReadOnly},
		{"cat x", ReadOnly},
		{"git status", ReadOnly},
		{"git -C sub log", ReadOnly},
		{"git branch", ReadOnly},
		{"git branch -d x", Dangerous},
		{"git branch --list 'f*'", ReadOnly},
		{"git tag", ReadOnly},
		{"git tag v1", Dangerous},
		{"git remote -v", ReadOnly},
		{"git remote add x y", Dangerous},
		{"git config --get user.name", ReadOnly},
		{"git config user.name x", Dangerous},
		{"git stash list", ReadOnly},
		{"git stash", Dangerous},
		{"git push", Dangerous},
		{"git commit -m x", Dangerous},
		{"rm x", Dangerous},
		{"curl x", Dangerous},
		{"sudo ls", Forbidden},
		{"mkfs.ext4 /dev/x", Forbidden},
		{"shutdown now", Forbidden},
		{"frobnicate", Unclassified},
	}
	for _, tt := range tests {
		f := strings.Fields(tt.argv)
		if got, why := Classify(f[0], f[1:]); got != tt.want || why == "" {
			t.Errorf("Classify(%s) = %s (%q), want %s", tt.argv, got, why, tt.want)
		}
	}
}
