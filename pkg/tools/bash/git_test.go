package bash_test

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// gitRepo makes a workspace holding a repository with one commit of
// f.txt and an uncommitted change to it, and returns the workspace.
func gitRepo(t *testing.T, p *tools.Pipeline) {
	t.Helper()
	out := mustRun(t, p, "git -c init.defaultBranch=main init -q . && printf 'one\\ntwo\\n' > f.txt && git add f.txt && "+
		"git -c user.name=a -c user.email=a@b commit -qm first && printf 'one\\nTHREE\\n' > f.txt")
	if out.IsError {
		t.Fatalf("git setup: %s", out.Content)
	}
}

// plant appends text to the file rel of the workspace, creating it and its
// directory; it stands for a write that happened before the call.
func plant(t *testing.T, ws, rel, text string, mode os.FileMode) {
	t.Helper()
	f := filepath.Join(ws, rel)
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(f)
	if err := os.WriteFile(f, append(old, []byte(text)...), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(f, mode); err != nil {
		t.Fatal(err)
	}
}

// chownTree gives everything under dir to uid, as files the agent wrote
// through the tools belong to the workspace's owner.
func chownTree(t *testing.T, dir string, uid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGitRunsNoProgramFromWorkspaceConfig: an agent that may write files
// in the workspace could plant git configuration (the repository's config,
// an included file, hooks, attributes naming diff and filter drivers, a
// .git file pointing at another git directory) naming a program, and have
// an allowed read-only git command run it. Each attack plants its files,
// runs the git commands that would fire it, and checks that the marker
// file the program would create does not exist.
func TestGitRunsNoProgramFromWorkspaceConfig(t *testing.T) {
	testenv.LookPath(t, "git", "git")
	type attack struct {
		name  string
		files map[string]string // relative path: content (appended)
		cmds  []string
		// sandboxOnly: the class is closed by the sandbox (read-only git
		// control files, attributes overridden), not by the environment.
		sandboxOnly bool
		// setup runs after the repository is made and before the files
		// are planted.
		setup string
	}
	const m = "MARKER"
	attacks := []attack{
		{name: "fsmonitor", files: map[string]string{".git/config": "[core]\n\tfsmonitor = \"touch " + m + "; false\"\n"},
			cmds: []string{"git status", "git diff"}},
		{name: "hooks and hooksPath", files: map[string]string{
			".git/config":            "[core]\n\thooksPath = hooks\n",
			"hooks/pre-commit":       "#!/bin/sh\ntouch " + m + "\n",
			".git/hooks/post-commit": "#!/bin/sh\ntouch " + m + "\n"},
			cmds: []string{"git -c user.name=a -c user.email=a@b commit -qam m"}},
		{name: "pager", files: map[string]string{".git/config": "[core]\n\tpager = touch " + m + "\n[pager]\n\tlog = touch " + m + "\n"},
			cmds: []string{"script -qec 'git log' /dev/null", "script -qec 'git -p diff' /dev/null"}},
		{name: "editor", files: map[string]string{".git/config": "[core]\n\teditor = touch " + m + "\n[sequence]\n\teditor = touch " + m + "\n"},
			cmds: []string{"git -c user.name=a -c user.email=a@b commit -qa"}},
		{name: "sshCommand", files: map[string]string{".git/config": "[core]\n\tsshCommand = touch " + m + "\n[remote \"o\"]\n\turl = ssh://example.invalid/r\n"},
			cmds: []string{"git fetch -q o"}},
		{name: "gitProxy", files: map[string]string{".git/config": "[core]\n\tgitProxy = ./proxy.sh\n[remote \"o\"]\n\turl = git://example.invalid/r\n",
			"proxy.sh": "#!/bin/sh\ntouch " + m + "\n"},
			cmds: []string{"git fetch -q o"}},
		{name: "uploadpack", files: map[string]string{".git/config": "[remote \"o\"]\n\turl = .\n\tuploadpack = touch " + m + "; false\n\treceivepack = touch " + m + "; false\n"},
			cmds: []string{"git fetch -q o", "git push -q o HEAD:refs/heads/x", "git ls-remote o"}},
		{name: "ext transport", files: map[string]string{".git/config": "[remote \"o\"]\n\turl = \"ext::sh -c touch% " + m + "\"\n"},
			cmds: []string{"git fetch -q o", "git ls-remote o"}},
		{name: "askpass", files: map[string]string{".git/config": "[core]\n\taskPass = touch " + m + "\n[credential]\n\thelper = \"!touch " + m + "\"\n"},
			cmds: []string{"git credential fill <<< $'protocol=https\\nhost=example.invalid\\n'"}},
		{name: "gpg programs",
			// Commits carrying an OpenPGP, an SSH and an X.509 signature:
			// log.showSignature makes git log and show verify them with the
			// format's program; signing runs gpg.ssh.defaultKeyCommand.
			setup: `s() { { git cat-file commit HEAD | sed -n '1,/^committer /p'; printf 'gpgsig -----BEGIN %s-----\n %s\n -----END %s-----\n' "$1" "$2" "$1"; ` +
				`git cat-file commit HEAD | sed '1,/^committer /d'; } | git hash-object -t commit -w --stdin; } && ` +
				`git update-ref refs/heads/pgp "$(s 'PGP SIGNATURE' iQ==)" && git update-ref refs/heads/ssh "$(s 'SSH SIGNATURE' U1NI)" && ` +
				`git update-ref refs/heads/x509 "$(s 'SIGNED MESSAGE' MIA=)"`,
			files: map[string]string{"sign.sh": "#!/bin/sh\ntouch " + m + "\nexit 1\n",
				".git/config": "[log]\n\tshowSignature = true\n[gpg]\n\tprogram = ./sign.sh\n\tformat = ssh\n[gpg \"openpgp\"]\n\tprogram = ./sign.sh\n" +
					"[gpg \"ssh\"]\n\tprogram = ./sign.sh\n\tdefaultKeyCommand = ./sign.sh\n\tallowedSignersFile = /dev/null\n[gpg \"x509\"]\n\tprogram = ./sign.sh\n"},
			cmds: []string{"git log -1 pgp", "git log -1 ssh", "git log -1 x509", "git show ssh", "git log --show-signature -1 x509",
				"git verify-commit pgp", "git verify-commit ssh", "git verify-commit x509",
				"git -c user.name=a -c user.email=a@b commit -S -qam signed"}},
		{name: "include.path", files: map[string]string{".git/config": "[include]\n\tpath = ../inc.cfg\n[includeIf \"gitdir:/\"]\n\tpath = ../inc.cfg\n",
			"inc.cfg": "[core]\n\tfsmonitor = \"touch " + m + "; false\"\n"},
			cmds: []string{"git status", "git diff"}},
		{name: "diff driver command", files: map[string]string{".gitattributes": "* diff=x\n",
			".git/config": "[diff \"x\"]\n\tcommand = \"touch " + m + "; true\"\n"},
			cmds: []string{"git diff", "git log -p", "git show HEAD", "git diff HEAD"}, sandboxOnly: true},
		{name: "diff textconv", files: map[string]string{".git/info/attributes": "* diff=x\n",
			".git/config": "[diff \"x\"]\n\ttextconv = \"touch " + m + "; cat\"\n"},
			cmds: []string{"git diff", "git log -p", "git show HEAD", "git blame f.txt", "git grep --textconv one", "git diff --textconv HEAD"}, sandboxOnly: true},
		{name: "filter driver", files: map[string]string{"sub/.gitattributes": "* filter=x\n", ".gitattributes": "*.txt filter=x\n",
			".git/config": "[filter \"x\"]\n\tclean = \"touch " + m + "; cat\"\n\tsmudge = \"touch " + m + "; cat\"\n\tprocess = \"touch " + m + "\"\n"},
			cmds: []string{"touch f.txt && git status", "touch f.txt && git diff", "git add f.txt", "git checkout -- f.txt"}, sandboxOnly: true},
		{name: "merge driver", files: map[string]string{".gitattributes": "* merge=x\n",
			".git/config": "[merge \"x\"]\n\tdriver = \"touch " + m + "; false\"\n"},
			cmds: []string{"git -c user.name=a -c user.email=a@b commit -qam c && git checkout -qb b HEAD~1 && echo other > f.txt && " +
				"git -c user.name=a -c user.email=a@b commit -qam d && git -c user.name=a -c user.email=a@b merge main"}, sandboxOnly: true},
		{name: "environment removed", files: map[string]string{
			"evil/HEAD": "ref: refs/heads/main\n", "evil/objects/.keep": "", "evil/refs/.keep": "",
			"evil/config":    "[core]\n\tbare = true\n\tsshCommand = \"touch ../" + m + "; false\"\n",
			".gitattributes": "* diff=x\n", "hooks/diff.sh": "#!/bin/sh\ntouch " + m + "\n"},
			cmds: []string{
				"cd evil && env -i PATH=/usr/bin:/bin git ls-remote ssh://example.invalid/r",
				"unset GIT_CONFIG_COUNT GIT_CONFIG_NOSYSTEM GIT_CONFIG_GLOBAL GIT_SSH_COMMAND GIT_ALLOW_PROTOCOL; cd evil && git ls-remote ssh://example.invalid/r",
				"env GIT_EXTERNAL_DIFF=./hooks/diff.sh git diff",
				"GIT_EXEC_PATH=$PWD/hooks /usr/lib/git-core/git-diff",
			}, sandboxOnly: true},
		{name: "write config during the call", files: map[string]string{".gitattributes": "* diff=x\n"},
			cmds:        []string{"git config diff.x.command 'touch " + m + "; true'; printf '[core]\\n\\tfsmonitor = \"touch " + m + "; false\"\\n' >> .git/config; git diff; git status"},
			sandboxOnly: true},
	}
	forEachMode(t, func(t *testing.T, mode bash.Mode) {
		for _, a := range attacks {
			if a.sandboxOnly && mode == bash.ModeOff {
				// Closed by the sandbox (read-only, sanitised git config);
				// without one a command can write .git/config itself, as
				// docs/SECURITY.md says.
				continue
			}
			t.Run(strings.ReplaceAll(a.name, " ", "_"), func(t *testing.T) {
				ws := newWorkspace(t, testUID)
				p := newPipeline(t, bash.Config{Workspace: ws, Sandbox: mode})
				gitRepo(t, p)
				if a.setup != "" {
					if out := mustRun(t, p, a.setup); out.IsError {
						t.Fatalf("setup: %s", out.Content)
					}
				}
				for rel, text := range a.files {
					perm := os.FileMode(0o644)
					if strings.HasSuffix(rel, ".sh") || strings.Contains(rel, "hooks/") {
						perm = 0o755
					}
					plant(t, ws, rel, text, perm)
				}
				chownTree(t, ws, testUID)
				for _, cmd := range a.cmds {
					out, err := run(context.Background(), t, p, map[string]any{"command": cmd})
					if err != nil {
						t.Fatalf("%s: %v", cmd, err)
					}
					if _, err := os.Stat(filepath.Join(ws, m)); err == nil {
						t.Fatalf("%s ran a program named in planted git configuration:\n%s", cmd, out.Content)
					}
				}
			})
		}
	})
}

// TestGitStillWorks: the neutralised configuration leaves git's own
// output intact: diff, log -p, show, blame and status show the change.
func TestGitStillWorks(t *testing.T) {
	testenv.LookPath(t, "git", "git")
	forEachMode(t, func(t *testing.T, mode bash.Mode) {
		ws := newWorkspace(t, testUID)
		p := newPipeline(t, bash.Config{Workspace: ws, Sandbox: mode})
		gitRepo(t, p)
		for _, tt := range []struct{ cmd, want string }{
			{"git diff", "+THREE"},
			{"git diff --stat", "f.txt | 2 +-"},
			{"git log -p", "+two"},
			{"git show HEAD", "+one"},
			{"git blame f.txt", "THREE"},
			{"git status --short", " M f.txt"},
			{"git grep -n one", "f.txt:1:one"},
			{"git -c user.name=a -c user.email=a@b commit -qam second && git log --oneline", "second"},
		} {
			out := mustRun(t, p, tt.cmd)
			if out.IsError || !strings.Contains(out.Content, tt.want) {
				t.Errorf("%s: want %q in the output, got (error %v):\n%s", tt.cmd, tt.want, out.IsError, out.Content)
			}
		}
		// A call a person approved may change the repository's config.
		cmd := "git config user.name someone && git config user.name"
		out, err := run(context.Background(), t, p, map[string]any{"command": cmd}, func(c *tools.Call) { c.Approved = true })
		if err != nil || out.IsError || !strings.Contains(out.Content, "someone") {
			t.Errorf("approved %s: %v\n%+v", cmd, err, out)
		}
	})
}

// TestGitWorksInARepositoryOwnedByAnotherUser: commands may run as a user
// who does not own the repository (a configured uid in a workspace root
// created); git trusts the workspace instead of refusing it as of dubious
// ownership.
func TestGitWorksInARepositoryOwnedByAnotherUser(t *testing.T) {
	testenv.LookPath(t, "git", "git")
	if !testenv.AsRoot(t) { // a root worker runs commands as another user
		return
	}
	forEachMode(t, func(t *testing.T, mode bash.Mode) {
		ws := newWorkspace(t, 0)
		git := func(args ...string) {
			cmd := exec.Command("git", args...)
			cmd.Dir = ws
			cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("git %v: %v\n%s", args, err, out)
			}
		}
		git("-c", "init.defaultBranch=main", "init", "-q", ".")
		plant(t, ws, "f.txt", "one\n", 0o644)
		git("add", "f.txt")
		git("-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "first")
		plant(t, ws, "f.txt", "two\n", 0o644)
		p := newPipeline(t, bash.Config{Workspace: ws, Sandbox: mode, UID: 4343})
		out := mustRun(t, p, "id -u; git status --short; git diff")
		if out.IsError || !strings.Contains(out.Content, "4343") || !strings.Contains(out.Content, " M f.txt") || !strings.Contains(out.Content, "+two") {
			t.Errorf("git as another user than the repository's owner:\n%s", out.Content)
		}
	})
}
