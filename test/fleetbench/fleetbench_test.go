package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testenv"
)

// mainEnv makes the test binary run the bench's main.
const mainEnv = "TOOLGATE_FLEETBENCH_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) != "" {
		main()
		os.Exit(0)
	}
	testenv.Main(m)
}

// TestFleetBenchSmall runs the bench small, two rounds on the real
// cluster, workers and sandbox, and checks its counts: every call was
// answered once and ok, and every id was appended to its file exactly
// once, none lost, none twice; that the cluster stored exactly one call,
// one result and one claim per call, at least one audit event per call,
// and delivered each call once (the nodes' own counts); and that the
// report holds the rates, latencies and CPU figures.
func TestFleetBenchSmall(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, "-n", "60", "-agents", "6", "-inflight", "4", "-rounds", "2")
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}
	out := stdout.String()
	wants := []string{
		`(?m)^round 1 \[A\]: results: 60 answered, 60 ok, 0 errors; executions: 60 once, 0 lost, 0 twice, 0 unexpected;`,
		`(?m)^round 2 \[A\]: results: 60 answered, 60 ok, 0 errors; executions: 60 once, 0 lost, 0 twice, 0 unexpected;`,
		`(?m)^round 1 \[A\]: 60 calls in [0-9.]+s: [0-9.]+ calls/s; queue wait p50 \S+ p90 \S+; execution p50 \S+ p90 \S+$`,
		`(?m)^round 2 \[A\]: CPU per call: workers\+children [0-9.]+ms \([0-9.]+ms [0-9.]+ms [0-9.]+ms\), nats-servers [0-9.]+ms`,
		`(?m)^worker A: calls/s [0-9.]+ [0-9.]+;`,
	}
	for _, r := range []string{"1", "2"} {
		wants = append(wants,
			`(?m)^round `+r+` \[A\]: stored per stream \(per call\): TOOLGATE_CALLS 60 \(1\.00\), TOOLGATE_RESULTS 60 \(1\.00\), TOOLGATE_AUDIT (6[0-9]|[7-9][0-9]) \([0-9.]+\), KV_toolgate_calls 60 \(1\.00\)[^;]*; all [0-9]+`,
			`(?m)^round `+r+` \[A\]: counts per call: calls delivered 1\.00, redelivered 0\.00; JetStream API requests [0-9.]+ \(errors [0-9.]+\); messages: workers sent [0-9.]+ got [0-9.]+, agents sent [0-9.]+ got [0-9.]+, nodes in [0-9.]+ out [0-9.]+, between nodes [0-9.]+$`)
	}
	for _, want := range wants {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("no /%s/ in the report:\n%s", want, out)
		}
	}
}
