package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestBinariesReportTheirBuild builds the three commands as a person does
// in a clone (the toolchain stamps the commit; no -ldflags) and checks
// that each reports the commit it was built from: worker --version,
// approver --version, toolctl --version and toolctl version.
func TestBinariesReportTheirBuild(t *testing.T) {
	git, rev := gitHead(t)
	top, err := exec.Command(git, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatal(err)
	}
	// The go command finds a repository by its .git directory: a linked
	// checkout (git worktree add), whose .git is a file, gets no stamp.
	if fi, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err != nil || !fi.IsDir() {
		t.Skip("a linked git checkout: the go command stamps no commit there; a clone it does")
	}
	bin := t.TempDir()
	// -buildvcs=true overrides a GOFLAGS=-buildvcs=false in the
	// environment: the stamp is what is under test.
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "../cmd/worker", "../cmd/approver", "../cmd/toolctl")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	line := regexp.MustCompile(`^(worker|approver|toolctl) (\S+) commit ([0-9a-f]{40})(\+dirty)? built (\S+) (go\S+)\n$`)
	for _, args := range [][]string{{"worker", "--version"}, {"approver", "--version"}, {"toolctl", "--version"}, {"toolctl", "version"}} {
		out, err := exec.Command(filepath.Join(bin, args[0]), args[1:]...).Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		m := line.FindStringSubmatch(string(out))
		if m == nil {
			t.Fatalf("%v printed %q", args, out)
		}
		if m[1] != args[0] || m[3] != rev || m[5] == "unknown" {
			t.Fatalf("%v printed %q: want program %s, commit %s and a build date", args, out, args[0], rev)
		}
	}
}

// gitHead is git's path and the commit checked out; without git, or
// outside a clone, the test skips (fails under CI, which runs in a clone).
func gitHead(t *testing.T) (git, rev string) {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed")
	}
	head, err := exec.Command(git, "rev-parse", "HEAD").Output()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("git rev-parse HEAD: %v (CI runs in a clone)", err)
		}
		t.Skipf("not in a git clone: %v", err)
	}
	return git, strings.TrimSpace(string(head))
}
