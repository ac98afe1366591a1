package test

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// TestVersionWithoutVCSStamp: toolgate-sandbox-init --version answers like
// the other programs; a build with VCS stamping off says which module it
// is and why no commit is known instead of "(devel) commit unknown"; a
// build from a git archive of the commit (a release's source download,
// no repository to read) reports that commit, from archive.txt.
func TestVersionWithoutVCSStamp(t *testing.T) {
	git, rev := gitHead(t)
	build := func(dir, out string, names ...string) {
		t.Helper()
		args := []string{"build", "-trimpath", "-buildvcs=false", "-o", out + "/"}
		for _, n := range names {
			args = append(args, "./cmd/"+n)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build in %s: %v\n%s", dir, err, b)
		}
	}
	version := func(bin, name string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(bin, name), "--version").Output()
		if err != nil {
			t.Fatalf("%s --version: %v", name, err)
		}
		return string(out)
	}

	unstamped := t.TempDir()
	build("..", unstamped, "worker", "toolgate-sandbox-init")
	for _, name := range []string{"worker", "toolgate-sandbox-init"} {
		line := version(unstamped, name)
		want := regexp.MustCompile(`^` + name + ` \(devel\) from github\.com/toolgate/toolgate source without version control information \(built with -buildvcs=false, or outside a git clone and a git archive\) go\S+\n$`)
		if !want.MatchString(line) {
			t.Errorf("unstamped %s --version printed %q", name, line)
		}
	}

	// The commit's git archive, built where no repository is.
	src := t.TempDir()
	archive := exec.Command("sh", "-c", `"$1" archive --format=tar HEAD | tar -x -C "$2"`, "sh", git, src)
	archive.Dir = ".." // the whole tree, not this directory's
	if b, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive: %v\n%s", err, b)
	}
	fromArchive := t.TempDir()
	build(src, fromArchive, "worker", "toolgate-sandbox-init")
	for _, name := range []string{"worker", "toolgate-sandbox-init"} {
		line := version(fromArchive, name)
		want := regexp.MustCompile(`^` + name + ` \S+ commit ` + rev + ` built \d{4}-\S+ go\S+\n$`)
		if !want.MatchString(line) {
			t.Errorf("%s --version from the commit's git archive printed %q, want commit %s", name, line, rev)
		}
	}
}
