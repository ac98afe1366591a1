package testenv

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestNoBareWaitsInTests: no test waits on a bare channel receive in its
// own goroutine (a statement at the top level of a test function or test
// helper taking a testing.TB): such a wait hangs until go test's timeout
// panics. Recv waits with a deadline and names what never came. Benchmarks
// and examples (which have no t to fail) are not held to it.
func TestNoBareWaitsInTests(t *testing.T) {
	bare := regexp.MustCompile(`^\t((\w+(, \w+)? :?= )?<-[\w.]+(\(\))?\s*(//.*)?$|if \w+ := <-[\w.]+(\(\))?;)`)
	funcLine := regexp.MustCompile(`^func (\([^)]*\) )?(\w+)\(`)
	checked := 0
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != "../.." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") && !strings.Contains(filepath.ToSlash(path), "internal/teststack/") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		fn := ""
		for i, line := range strings.Split(string(b), "\n") {
			if m := funcLine.FindStringSubmatch(line); m != nil {
				fn = m[2]
			}
			if !bare.MatchString(line) || strings.Contains(line, "ctx.Done()") ||
				strings.HasPrefix(fn, "Benchmark") || strings.HasPrefix(fn, "Example") || strings.HasPrefix(fn, "start") && strings.HasSuffix(path, "example_test.go") {
				continue
			}
			t.Errorf("%s:%d (in %s): a bare channel receive; wait with testenv.Recv: %s", path, i+1, fn, strings.TrimSpace(line))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files", checked)
	}
}
