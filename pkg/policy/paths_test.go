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
