package policy

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWritesToCodeBearingGitFilesAsk: git runs programs named in its
// configuration, hooks and attributes, and follows a .git file to another
// git directory. Under the built-in policy, which lets write and edit
// change workspace files freely, every write to one of those files, at
// any depth and in any letter case, needs a person.
func TestWritesToCodeBearingGitFilesAsk(t *testing.T) {
	ws, _ := fixture(t)
	if err := os.MkdirAll(filepath.Join(ws, "lib", "vendor"), 0o755); err != nil {
		t.Fatal(err)
	}
	g := NewGate(nil)
	var cases []decisionCase
	for _, p := range []string{
		".git/config", ".git/hooks/pre-commit", ".git/info/attributes", ".git/info/exclude",
		".git/config.worktree", ".git/commondir", ".git/worktrees/w/config.worktree", ".git/worktrees/w/gitdir",
		".git/modules/a/config", ".git/modules/a/modules/b/config", ".git/modules/a/hooks/post-checkout",
		".git/modules/a/info/attributes", ".git/objects/info/alternates", ".git",
		"sub/.git", "sub/.git/config", ".gitattributes", "sub/.gitattributes", "lib/vendor/.gitattributes",
		".gitmodules", "sub/.gitmodules", ".GIT/CONFIG", ".GitAttributes", "sub/../.gitattributes", "./.gitmodules",
		".npmrc", "sub/.npmrc", ".yarnrc", ".yarnrc.yml",
	} {
		for _, tool := range []string{"write", "edit"} {
			cases = append(cases, decisionCase{tool + " " + p, call{tool: tool, args: at(p)}, Ask, "builtin.protected_paths"})
		}
	}
	for _, p := range []string{".gitignore", "sub/.gitkeep", "gitattributes", ".git-blame-ignore-revs", "src/git/config"} {
		cases = append(cases, decisionCase{"write " + p, call{tool: "write", args: at(p)}, Allow, "tools.write.action"})
	}
	checkDecisions(t, g, ws, cases)
}

// TestWritesIntoDirectoriesHoldingCodeBearingFilesAsk: a recursive copy or
// an extraction into a directory can replace the code-bearing files it
// holds, whatever their names in the command. Under a policy that runs
// every command and allows writes, such a write asks by the entry of the
// file it could replace; into a directory holding none it runs.
func TestWritesIntoDirectoriesHoldingCodeBearingFilesAsk(t *testing.T) {
	ws, _ := fixture(t)
	for _, f := range []string{"pkg/.npmrc", "lib/.gitattributes", "mod/.gitmodules", "repo/.git/HEAD", "plain/a.txt"} {
		if err := os.MkdirAll(filepath.Join(ws, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, f), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	full, _, err := Parse([]byte("tools:\n  write: allow\n  edit: allow\nexec:\n  security: full\n"), "full")
	if err != nil {
		t.Fatal(err)
	}
	checkDecisions(t, NewGate(full), ws, []decisionCase{
		{"cp -r into a package", call{tool: "run_shell", args: sh("cp -r evil/. pkg")}, Ask, "builtin.protected_paths[8]"},
		{"rsync into a directory with attributes", call{tool: "run_shell", args: sh("rsync -a evil/ lib/")}, Ask, "builtin.protected_paths[6]"},
		{"tar -C into a directory with submodules", call{tool: "run_shell", args: sh("tar -xf evil.tar -C mod")}, Ask, "builtin.protected_paths[7]"},
		{"cp -r next to a repository", call{tool: "run_shell", args: sh("cp -r evil/. repo")}, Ask, "builtin.protected_paths[5]"},
		{"cp -r into a plain directory", call{tool: "run_shell", args: sh("cp -r sub/. plain")}, Allow, ""},
	})
}
