package workspace

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
)

// ignoreTree is a tree whose .gitignore files exercise git's rules.
var ignoreTree = map[string]string{
	".gitignore": strings.Join([]string{
		"# a comment",
		"*.log",
		"!important.log",
		"/rootonly.txt",
		"build/",
		"doc/**/*.pdf",
		"a/**/b.txt",
		"**/cache",
		"[!a-c]*.tmp",
		`\#hash.txt`,
		`\!bang.txt`,
		"trailing.txt   ",
		`space\ .txt`,
		"x?.dat",
		"logs/**",
		"!logs/keep.me",
		"nested/deep/",
		"*.[oa]",
		"[unclosed",
		`bad\`,
		"",
	}, "\n"),
	"app.log": "", "important.log": "", "rootonly.txt": "", "sub/rootonly.txt": "",
	"build/out.bin": "", "sub/build/out.bin": "", "build.txt": "",
	"doc/x.pdf": "", "doc/a/b/y.pdf": "", "doc/y.txt": "",
	"a/b.txt": "", "a/x/y/b.txt": "", "b.txt": "",
	"cache/c": "", "sub/cache/c": "", "sub/cachex": "",
	"a.tmp": "", "d.tmp": "", "z.tmp": "",
	"#hash.txt": "", "!bang.txt": "", "trailing.txt": "", "space .txt": "", "space.txt": "",
	"x1.dat": "", "x12.dat": "", "logs/keep.me": "", "logs/drop.me": "",
	"nested/deep/file": "", "nested/deepfile": "", "lib.o": "", "lib.a": "", "lib.c": "",
	".hidden/file": "", "[unclosed": "", `bad\`: "",
	"sub/.gitignore": "!*.log\n*.txt\n!keep.txt\n/anchored\n",
	"sub/again.log":  "", "sub/x.txt": "", "sub/keep.txt": "", "sub/anchored": "", "sub/inner/anchored": "",
	"sub/inner/.gitignore": "keep.txt\n", "sub/inner/keep.txt": "", "sub/inner/other.log": "",
}

func TestWalkIgnoresLikeGit(t *testing.T) {
	gitBin := testenv.LookPath(t, "git", "git")
	dir := t.TempDir()
	for name, content := range ignoreTree {
		p := filepath.Join(dir, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(content), 0o644))
	}
	git := func(sub string, args ...string) []string {
		cmd := exec.Command(gitBin, args...)
		cmd.Dir = filepath.Join(dir, sub)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		var files []string
		for _, f := range bytes.Split(out, []byte{0}) {
			if len(f) > 0 {
				files = append(files, string(f))
			}
		}
		slices.Sort(files)
		return files
	}
	git("", "init", "-q")
	ws, err := Open(dir)
	must(t, err)
	defer ws.Close()
	for _, sub := range []string{"", "sub", "sub/inner", "doc"} {
		want := git(sub, "ls-files", "--others", "--exclude-standard", "-z")
		var got []string
		top := sub
		if top == "" {
			top = "."
		}
		_, err := ws.Walk(context.Background(), top, WalkOptions{Hidden: true}, nil, func(e *Entry) error {
			got = append(got, e.Rel)
			return nil
		})
		must(t, err)
		slices.Sort(got)
		t.Logf("%s: %d files not ignored", top, len(got))
		if !slices.Equal(got, want) {
			t.Errorf("walk of %q disagrees with git ls-files --others --exclude-standard:\nonly walk: %v\nonly git:  %v", top, diff(got, want), diff(want, got))
		}
	}
}

func diff(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}
