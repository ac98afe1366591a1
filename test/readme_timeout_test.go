package test

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestReadmeTestCommandCarriesTimeout: every go test command of the
// README carries a -timeout (the end-to-end package runs beyond Go's
// default 10 minutes on a busy 2-core machine), and .ci/run, which runs
// the same commands with -race, gives each at least as long.
func TestReadmeTestCommandCarriesTimeout(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	timeout := regexp.MustCompile(`-timeout (\S+)`)
	longest := func(lines []string, dir string) time.Duration {
		var d time.Duration
		for _, l := range lines {
			if !strings.Contains(l, "go test") || strings.Contains(l, "test/browser") != (dir == "test/browser") {
				continue
			}
			if m := timeout.FindStringSubmatch(l); m != nil {
				if v, err := time.ParseDuration(m[1]); err == nil && v > d {
					d = v
				}
			}
		}
		return d
	}
	var cmds []string
	for _, l := range shellLines(string(readme)) {
		if strings.Contains(l, "go test") {
			cmds = append(cmds, l)
			if !timeout.MatchString(l) {
				t.Errorf("README's %q has no -timeout: Go's default of 10 minutes per package is too short for ./test on a busy machine", l)
			}
		}
	}
	if len(cmds) == 0 {
		t.Fatal("README.md has no go test command")
	}
	var ciLines []string
	for _, l := range strings.Split(string(ci), "\n") {
		if strings.Contains(l, "go test -race") {
			ciLines = append(ciLines, l)
		}
	}
	for _, dir := range []string{".", "test/browser"} {
		if r, c := longest(cmds, dir), longest(ciLines, dir); c < r {
			t.Errorf("%s: .ci/run gives go test -race %v, less than the README's %v", dir, c, r)
		}
	}
}
