package test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestWorkerHelp: worker --help, like toolctl --help, says what the
// program does, lists its flags and shows examples, on standard output
// with exit code 0.
func TestWorkerHelp(t *testing.T) {
	bin := buildBinaries(t, "worker")
	for _, arg := range []string{"--help", "-h"} {
		out, err := exec.Command(filepath.Join(bin, "worker"), arg).Output()
		if err != nil {
			t.Fatalf("worker %s: %v", arg, err)
		}
		for _, want := range []string{"usage: worker", "policy gate", "embedded NATS", "flags:", "-workspace", "examples:",
			"worker --nats nats://", "toolctl call"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("worker %s lacks %q:\n%s", arg, want, out)
			}
		}
	}
}
