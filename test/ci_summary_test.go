package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCISummary runs .ci/summary over go test outputs: a timeout panic, a
// build or setup failure and a failing test each count as failed and name
// their package; a go test that failed without a FAIL line is a failure
// too. The last line keeps the form "tests: N passed, N failed, N skipped".
func TestCISummary(t *testing.T) {
	inputs, err := filepath.Glob("testdata/ci/*.txt")
	if err != nil || len(inputs) < 4 {
		t.Fatalf("inputs: %v %v", inputs, err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".txt")
		t.Run(name, func(t *testing.T) {
			status := "1"
			if name == "pass" {
				status = "0"
			}
			out, err := exec.Command("../.ci/summary", in, status).Output()
			if code := exitCode(err); (code == 0) != (name == "pass") {
				t.Errorf("exit %d (%v)", code, err)
			}
			want, err := os.ReadFile(strings.TrimSuffix(in, ".txt") + ".golden")
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != string(want) {
				t.Errorf("summary of %s:\n%s\nwant:\n%s", in, out, want)
			}
		})
	}
}
