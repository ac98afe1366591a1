package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
)

// mainEnv makes the test binary run the bench's main: the bench starts
// its raw and bus workers as copies of its own executable, so the test
// runs the bench as one too.
const mainEnv = "TOOLGATE_BENCH_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) != "" || os.Getenv(mainEnv) != "" {
		main()
		os.Exit(0)
	}
	testenv.Main(m)
}

// TestBenchMeasuresEverySide runs the bench small against the real worker
// and checks that every side answered every call (a wrong or missing
// result panics the bench) and that the report holds what BENCHMARKS.md
// quotes: each side's rates, latencies and CPU, and the ratios.
func TestBenchMeasuresEverySide(t *testing.T) {
	worker := filepath.Join(t.TempDir(), "worker")
	build := exec.Command("go", "build", "-o", worker, "github.com/toolgate/toolgate/cmd/worker")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the worker: %v\n%s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"read", "write"} {
		t.Run(tool, func(t *testing.T) {
			cmd := exec.Command(self, "-tool", tool, "-n", "60", "-rounds", "2", "-inflight", "1,8",
				"-scale=false", "-mem=false", "-gate=false", "-worker", worker, "-baseline", worker)
			cmd.Env = append(os.Environ(), mainEnv+"=1")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("bench: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
			}
			out := stdout.String()
			num := `[0-9.]+(µs|ms|s)`
			for _, f := range []string{"1", "8"} {
				for _, mode := range []string{"js", "core"} {
					for _, side := range []string{"raw", "bus", "toolgate", "embedded", "base"} {
						want := fmt.Sprintf(`(?m)^%s +%s +%s +\d+ \d+ +%s %s +%s %s`, side, mode, f, num, num, num, num)
						if !regexp.MustCompile(want).MatchString(out) {
							t.Errorf("no rates and latencies of %s, %s, %s in flight (want /%s/):\n%s", side, mode, f, want, out)
						}
						want = fmt.Sprintf(`(?m)^%s +%s +%s  CPU µs per call: worker \d+ \d+; server and load generator \d+ \d+$`, side, mode, f)
						if !regexp.MustCompile(want).MatchString(out) {
							t.Errorf("no CPU of %s, %s, %s in flight:\n%s", side, mode, f, out)
						}
						if side == "raw" {
							continue
						}
						want = fmt.Sprintf(`(?m)^%s +%s +%s  CPU µs per call, every process: \d+ \d+; %s/raw [0-9.]+ [0-9.]+$`, side, mode, f, side)
						if !regexp.MustCompile(want).MatchString(out) {
							t.Errorf("no CPU of every process of %s, %s, %s in flight:\n%s", side, mode, f, out)
						}
					}
					for _, want := range []string{
						fmt.Sprintf(`(?m)^ratio +%s +%s  calls/s toolgate/raw [0-9.]+ [0-9.]+; p50 toolgate/raw [0-9.]+ [0-9.]+$`, mode, f),
						fmt.Sprintf(`(?m)^ratio +%s +%s  calls/s bus/raw [0-9.]+ [0-9.]+; toolgate/bus [0-9.]+ [0-9.]+$`, mode, f),
						fmt.Sprintf(`(?m)^ratio +%s +%s  calls/s embedded/raw [0-9.]+ [0-9.]+; p50 embedded/raw [0-9.]+ [0-9.]+$`, mode, f),
						fmt.Sprintf(`(?m)^ratio +%s +%s  calls/s base/raw [0-9.]+ [0-9.]+; p50 base/raw [0-9.]+ [0-9.]+$`, mode, f),
					} {
						if !regexp.MustCompile(want).MatchString(out) {
							t.Errorf("no ratios (want /%s/):\n%s", want, out)
						}
					}
				}
			}
			if bytes.Contains(stdout.Bytes(), []byte("errors)")) {
				t.Errorf("calls failed:\n%s", out)
			}
			// Every bus call's audit event (one per allowed call, the
			// gate's decision folded in) was stored: 2 rounds, 2 publish
			// modes, 2 in-flight counts, 60 calls each.
			want := "[bus] bus worker: 480 audit events published, 480 stored, 0 refused"
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("bus audit events: want %q in the bench's stderr:\n%s", want, &stderr)
			}
		})
	}
}
