package test

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy/shell"
)

// The run-time classes: attacks that use what bash and the programs it
// runs do while they run, which no renderer can print back. Each is
// first run with bash itself in the escape oracle's setting, to show it
// reads, writes or runs what it must not; then it is sent through a real
// worker with bubblewrap under a permissive policy on a root-owned
// workspace (the gate lets most of them run there, so what holds them is
// the shell's fixed state and the kernel's boundary), and its effect
// must be absent.

type runtimeAttack struct {
	name, command string
	// locale: the payload needs a locale other than C to have an effect
	// when run by bash itself.
	locale bool
}

// runRuntimeAttacks shows each attack has its effect with bash itself,
// then that it has none through the worker.
func runRuntimeAttacks(t *testing.T, attacks []runtimeAttack) {
	t.Helper()
	s, c := escapeWorker(t, escapePolicies(t)[2])
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			command := s.expand(a.command)
			if got := s.direct(t, command); len(got) == 0 {
				if a.locale {
					testenv.Missing(t, "bash itself does not translate $\"...\" here (no fr_FR.UTF-8 locale): install the Debian package locales-all")
				}
				t.Fatalf("%q has no effect when run by bash itself; the test proves nothing", command)
			}
			r := send(t, c, command)
			if got := s.escapes(t, r.Output); len(got) > 0 {
				t.Fatalf("%q through the worker (%s, %+v): %s\n%s", command, r.Status, r.Decision, strings.Join(got, "; "), r.Output)
			}
		})
	}
}

// Assignments inside expansions: ${name:=v} and ${name=v} assign, in
// any word bash expands.
func TestAttackRuntimeAssignInExpansion(t *testing.T) {
	runRuntimeAttacks(t, []runtimeAttack{
		{name: "CDPATH word", command: "x=${CDPATH:={O}}; cd rtdir && cat secret"},
		{name: "CDPATH =", command: "x=${CDPATH={O}}; cd rtdir && cat secret"},
		{name: "CDPATH [[ ]]", command: "[[ ${CDPATH:={O}} ]]; cd rtdir && cat secret"},
		{name: "CDPATH case", command: "case ${CDPATH:={O}} in *) cd rtdir && cat secret;; esac"},
		{name: "CDPATH here-string", command: ": <<< ${CDPATH:={O}}; cd rtdir && cat secret"},
		{name: "CDPATH pushd", command: "x=${CDPATH:={O}}; pushd rtdir >/dev/null && cat secret"},
		{name: "CDPATH command substitution", command: "x=$(: ${CDPATH:={O}}; cd rtdir && cat secret); echo \"$x\""},
		{name: "CDPATH .git fsmonitor", command: "x=${CDPATH:={W}/.git}; cd hooks/.. && printf '[core]\\n\\tfsmonitor = \"touch m31f\"\\n' >> config"},
		{name: "TEXTDOMAIN catalog", command: "x=${TEXTDOMAINDIR:=$PWD/loc}${TEXTDOMAIN:=t}${LANGUAGE:=fr}${LC_ALL:=fr_FR.UTF-8}\necho $\"hello\"", locale: true}, // translated as its line is read: the catalog is set a line before
	})
}

// The parser's mode changes mid-script: bash in POSIX mode and dash end
// ${x:-'} at the first }, so the next line means something else.
func TestAttackRuntimeModeSwitch(t *testing.T) {
	// bash reads one assignment of a plain variable; POSIX mode reads
	// three commands.
	line := `cat notes.txt; x="${y:-'}"; cat {O}/rtdir/secret; sh x31; z="'}"`
	runRuntimeAttacks(t, []runtimeAttack{
		{name: "POSIXLY_CORRECT in an expansion", command: "z=${POSIXLY_CORRECT:=1}\n" + line},
		{name: "set -o posix", command: "set -o posix\n" + line},
		{name: "bash --posix", command: "bash --posix -c " + shell.Quote(line, false)},
		{name: "exec -a sh bash", command: "exec -a sh bash -c " + shell.Quote(line, false)},
		{name: "sh -c", command: "sh -c " + shell.Quote(line, false)},
	})
}

// Programs that fill text in at run time: a file name carrying quotes
// becomes code in an sh -c or awk string.
func TestAttackRuntimeFilledText(t *testing.T) {
	runRuntimeAttacks(t, []runtimeAttack{
		{name: "find sh -c bare {}", command: "find fq -name 'q*' -exec sh -c 'echo {}' \\;"},
		{name: "find sh -c quoted {}", command: "find fq -name 'q*' -exec sh -c \"echo '{}'\" \\;"},
		{name: "find awk {}", command: "find fq -name 'k*' -exec awk 'BEGIN{print \"{}\"}' \\;"},
		{name: "xargs sh -c {}", command: "find fq -name 'q*' -print0 | xargs -0 -I{} sh -c 'echo {}'"},
	})
}

// Paths bash, a program or an include resolves differently from the
// gate.
func TestAttackRuntimePaths(t *testing.T) {
	runRuntimeAttacks(t, []runtimeAttack{
		{name: "cd L/../.. logical", command: "cd L/../.. && cat sec31"},
		{name: "link target against its own directory", command: "cd a/b/c && ln -s .. ../../../up && cat ../../../up/sec31"},
		{name: "find -exec cat follows a link", command: "find links -name out -exec cat {} \\;"},
		{name: "diff -r follows links", command: "diff -r d1 d2"},
		{name: "git config --includes", command: "git config --file inc.cfg --includes --list"},
		{name: "mawk -W exec", command: "mawk -W exec prog.awk"},
	})
}
