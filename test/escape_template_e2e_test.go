package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testenv"
)

// TestEscapeOracleKernelInATemplate is the kernel-only escape oracle
// with the bash tool's sandboxes prepared ahead: where the worker is
// root with per-call cgroups in a v1 hierarchy, every call of a
// judgement but its first two runs in a sandbox forked by that
// judgement's sandbox template, which must hold the same boundary.
func TestEscapeOracleKernelInATemplate(t *testing.T) {
	seen := make(chan int, 1)
	stop := make(chan struct{})
	go func() { // counts the templates that ran meanwhile
		n := map[string]bool{}
		for {
			for _, pid := range templateProcs() {
				n[pid] = true
			}
			select {
			case <-stop:
				seen <- len(n)
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	escapeOracleKernel(t, true)
	close(stop)
	n := testenv.Recv(t, seen, "the count of the templates that ran")
	t.Logf("%d sandbox templates served the oracle's calls", n)
	if n == 0 && os.Geteuid() == 0 && cgroupV1() {
		t.Errorf("no sandbox template ran: the oracle did not test one")
	}
}

// templateProcs are the pids of the sandbox templates running on the
// host.
func templateProcs() []string {
	var out []string
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		b, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(b), "\x00--template=") {
			out = append(out, filepath.Base(filepath.Dir(f)))
		}
	}
	return out
}

// cgroupV1 reports whether this process is in a cgroup v1 pids
// hierarchy (where sandbox templates can be).
func cgroupV1() bool {
	b, err := os.ReadFile("/proc/self/cgroup")
	return err == nil && strings.Contains(string(b), ":pids:")
}
