package bash_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// TestShellStateIsFixed: the state the gate judges a command in - cd
// resolving .. as the kernel does, bash's own dialect, and the variables
// that change where cd goes, how bash parses, expands and translates,
// and what it runs around commands - cannot be changed by the command.
// Each attempt is judged by its effect: the output it would change.
func TestShellStateIsFixed(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode bash.Mode) {
		ws := newWorkspace(t, testUID)
		for name, content := range map[string]string{
			"alt/rtdir/f": "ALT31\n", "a/b/.keep": "", "here31": "", "g1": "", "rc": "echo RC''RAN31\n",
		} {
			p := filepath.Join(ws, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("a/b", filepath.Join(ws, "L")); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			for _, d := range []string{"alt", "alt/rtdir", "a", "a/b"} {
				_ = os.Chmod(filepath.Join(ws, d), 0o755)
			}
		}
		p := newPipeline(t, bash.Config{Workspace: ws, Sandbox: mode})
		posixLine := `echo "${x:-'}"; echo INJ""ECTED31; echo "'}"`
		tests := []struct {
			name, command string
			never, want   string
		}{
			{"CDPATH in an expansion", "x=${CDPATH:=$PWD/alt}\ncd rtdir && cat f", "ALT31", ""},
			{"CDPATH =", "x=${CDPATH=$PWD/alt}\ncd rtdir && cat f", "ALT31", ""},
			{"CDPATH assigned", "CDPATH=$PWD/alt\ncd rtdir && cat f", "ALT31", ""},
			{"CDPATH by read", "read CDPATH <<< \"$PWD/alt\"\ncd rtdir && cat f", "ALT31", ""},
			{"CDPATH by printf -v", "printf -v CDPATH %s \"$PWD/alt\"\ncd rtdir && cat f", "ALT31", ""},
			{"CDPATH unset first", "unset CDPATH; CDPATH=$PWD/alt\ncd rtdir && cat f", "ALT31", ""},
			{"CDPATH by declare -g", "declare -g CDPATH=$PWD/alt\ncd rtdir && cat f", "ALT31", ""},
			{"POSIXLY_CORRECT in an expansion", "z=${POSIXLY_CORRECT:=1}\n" + posixLine, "\nINJECTED31\n", ""},
			{"set -o posix", "set -o posix\n" + posixLine, "\nINJECTED31\n", ""},
			{"shopt -so posix", "shopt -so posix\n" + posixLine, "\nINJECTED31\n", ""},
			{"BASH_COMPAT", "x=${BASH_COMPAT:=31}\necho \"[${BASH_COMPAT-unset}]\"", "[31]", "[unset]"},
			{"TEXTDOMAIN", "x=${TEXTDOMAINDIR:=$PWD}${TEXTDOMAIN:=t}\necho \"[${TEXTDOMAINDIR-unset}${TEXTDOMAIN-}]\"", "[" + ws, "[unset]"},
			{"GLOBIGNORE", "GLOBIGNORE=g*\necho [g]1", "", "g1"},
			{"EXECIGNORE", "x=${EXECIGNORE:=*}\necho \"[${EXECIGNORE-unset}]\"", "[*]", "[unset]"},
			{"BASH_ENV", "export BASH_ENV=$PWD/rc\nbash -c true", "RCRAN31", ""},
			{"ENV", "export ENV=$PWD/rc\nsh -i -c true </dev/null", "RCRAN31", ""},
			{"PS4", "PS4='$(echo PS''4RAN31) '\nset -x; true", "PS4RAN31", "+ true"},
			{"PROMPT_COMMAND", "x=${PROMPT_COMMAND:=date}\necho \"[${PROMPT_COMMAND-unset}]\"", "[date]", "[unset]"},
			{"cd .. is physical", "cd L/../.. && ls", "", "here31"},
			{"IFS stays assignable", "IFS= read -r a <<< ' x '; echo \"[$a]\"", "", "[ x ]"},
			{"line numbers are the command's", "echo $LINENO", "", "1"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				out := mustRun(t, p, tt.command)
				got := out.Content
				if tt.never != "" && strings.Contains(got, tt.never) {
					t.Errorf("%q changed the shell's state: the output holds %q:\n%s", tt.command, tt.never, got)
				}
				if tt.want != "" && !strings.Contains(got, tt.want) {
					t.Errorf("%q: the output lacks %q:\n%s", tt.command, tt.want, got)
				}
			})
		}
	})
}
