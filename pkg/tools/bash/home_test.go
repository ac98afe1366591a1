package bash_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// TestDotfilesInTheWorkspaceAreNotRead: programs read configuration from
// HOME (shell start-up files, less's lesskey, git, npm, pip, ssh). An
// agent that may write workspace files must not be able to plant any: a
// command's HOME is a fresh empty directory of its own outside the
// workspace, and its environment is an allowlist.
func TestDotfilesInTheWorkspaceAreNotRead(t *testing.T) {
	const m = "MARKER"
	planted := map[string]string{
		".bashrc":              "touch " + m + "\n",
		".bash_profile":        "touch " + m + "\n",
		".bash_login":          "touch " + m + "\n",
		".profile":             "touch " + m + "\n",
		".bash_logout":         "touch " + m + "\n",
		".lesskey":             "#env\nLESSOPEN=|touch " + m + " %s\n",
		".config/lesskey":      "#env\nLESSOPEN=|touch " + m + " %s\n",
		".gitconfig":           "[core]\n\tfsmonitor = \"touch " + m + "; false\"\n[alias]\n\tst = !touch " + m + "\n",
		".config/git/config":   "[core]\n\tfsmonitor = \"touch " + m + "; false\"\n",
		".npmrc":               "init-module=" + m + "\n",
		".config/pip/pip.conf": "[global]\nindex-url = http://" + m + "/\n",
		".pip/pip.conf":        "[global]\nindex-url = http://" + m + "/\n",
		".ssh/config":          "Host *\n\tProxyCommand touch " + m + "\n",
		".inputrc":             "$include /" + m + "\n",
		".wgetrc":              "output_document = " + m + "\n",
		".curlrc":              "output = " + m + "\n",
	}
	forEachMode(t, func(t *testing.T, mode bash.Mode) {
		ws := newWorkspace(t, testUID)
		p := newPipeline(t, bash.Config{Workspace: ws, Sandbox: mode})
		mustRun(t, p, "git -c init.defaultBranch=main init -q . && echo x > f && git add f")
		for rel, text := range planted {
			plant(t, ws, rel, text, 0o644)
		}
		for _, cmd := range []string{
			"bash -lc true", "bash -ic true", "bash -lic 'exit 0'", "sh -lc true",
			"less f < /dev/null", "git status", "git st",
			"cd /tmp && npm config get init-module", "pip3 config list", "ssh -G example.invalid",
		} {
			out := mustRun(t, p, cmd)
			if _, err := os.Stat(filepath.Join(ws, m)); err == nil {
				t.Fatalf("%s read a dotfile planted in the workspace:\n%s", cmd, out.Content)
			}
			if strings.Contains(out.Content, m) {
				t.Errorf("%s shows configuration planted in the workspace:\n%s", cmd, out.Content)
			}
		}
		// HOME is empty, writable, outside the workspace, and fresh for
		// every call; the XDG directories lie under it.
		for range 2 {
			out := mustRun(t, p, `test "$HOME" != "$PWD" && case "$HOME/" in "$PWD"/*) exit 9;; esac && test -z "$(ls -A "$HOME")" && `+
				`touch "$HOME/mine" && test "$XDG_CONFIG_HOME" = "$HOME/.config" && test "$XDG_CACHE_HOME" = "$HOME/.cache" && echo HOME-OK`)
			if out.IsError || !strings.Contains(out.Content, "HOME-OK") {
				t.Fatalf("HOME is not a fresh private directory:\n%s", out.Content)
			}
		}
	})
}
