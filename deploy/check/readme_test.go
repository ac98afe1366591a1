package check

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeBlock is a shell block of deploy/README.md and how it is checked:
// "run" (run here), "cluster" (needs a cluster or a Docker daemon), or
// the names of the tests that check what it does.
type readmeBlock struct {
	check string
	lines []string
}

var checkMark = regexp.MustCompile(`^<!-- check: (.+) -->$`)

func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var blocks []readmeBlock
	for i := 0; i < len(lines); i++ {
		if lines[i] != "```sh" {
			continue
		}
		mark := ""
		if i > 0 {
			if m := checkMark.FindStringSubmatch(lines[i-1]); m != nil {
				mark = m[1]
			}
		}
		if mark == "" {
			t.Errorf("deploy/README.md:%d: a shell block without <!-- check: run|cluster|TestName --> above it", i+1)
		}
		blk := readmeBlock{check: mark}
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			blk.lines = append(blk.lines, lines[i])
		}
		blocks = append(blocks, blk)
	}
	return blocks
}

// testNames are the test functions of the repository.
func testNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	re := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	err := filepath.WalkDir("../..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, "_test.go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range re.FindAllStringSubmatch(string(b), -1) {
				names[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestReadmeCommands: every shell block of deploy/README.md says how it
// is checked; blocks naming tests name tests that exist; blocks marked
// run are run here, with the binaries built from this checkout, in a
// fresh state directory, and must succeed.
func TestReadmeCommands(t *testing.T) {
	blocks := readmeBlocks(t)
	tests := testNames(t)
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/worker", "./cmd/toolctl")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	work := t.TempDir()
	env := append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "TOOLGATE_STATE_DIR="+filepath.Join(work, "state"), "HOME="+work)
	ran := 0
	for _, b := range blocks {
		switch b.check {
		case "cluster", "":
			continue
		case "run":
			for _, l := range b.lines {
				cmd := exec.Command("bash", "-euo", "pipefail", "-c", l)
				cmd.Dir, cmd.Env = work, env
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("deploy/README.md: %q: %v\n%s", l, err, out)
				}
				ran++
			}
		default:
			for _, name := range strings.Fields(b.check) {
				if !tests[name] {
					t.Errorf("deploy/README.md names %s, which is no test", name)
				}
			}
		}
	}
	if ran == 0 {
		t.Fatal("no command of deploy/README.md ran")
	}
	// What the commands that ran should have made.
	for _, f := range []string{"fleet/auth.conf", "fleet/worker.creds", "fleet/approver.creds", "fleet/admin.creds", "toolctl.bash", "_toolctl", "toolctl.fish"} {
		if fi, err := os.Stat(filepath.Join(work, f)); err != nil || fi.Size() == 0 {
			t.Errorf("after the README's commands, %s: %v", f, err)
		}
	}
	if out, err := exec.Command("bash", "-n", filepath.Join(work, "toolctl.bash")).CombinedOutput(); err != nil {
		t.Errorf("toolctl.bash: %v\n%s", err, out)
	}
}
