//go:build linux

package bash

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// cpuProcess is the CPU time of this whole process and of its reaped
// children so far: a prepared sandbox is made on other threads than the
// call's.
func cpuProcess() time.Duration { return cpuOf(syscall.RUSAGE_SELF) }

// bareBwrap is the bare bubblewrap command a sandboxed call is held
// against: the whole root read-only, every namespace, its own /dev,
// /proc and /tmp, no seccomp filter, no drop of root.
var bareBwrap = []string{"bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
	"--unshare-all", "--die-with-parent", "--new-session", "bash", "-c", "true"}

// BenchmarkPreparedVsBwrap alternates, call by call in one run, a
// sandboxed call of "true" restricted to its program (as a gate that
// resolved it leaves it) in a sandbox prepared ahead (Config.Prepared),
// the same call with its sandbox built on its path, and bare bwrap
// (bareBwrap). It reports the p50 wall time of each and the CPU time per
// call of the whole process and its children: for the prepared call,
// from its start until the sandbox replacing the one it took is ready
// (the preparation is the call's cost, made off its path).
func BenchmarkPreparedVsBwrap(b *testing.B) {
	testenv.LookPath(b, "bwrap", "bubblewrap")
	ws := ownedWorkspace(b)
	defer useSmallInit(b)()
	prep, err := newBash(Config{Workspace: ws, Sandbox: ModeRequire, Prepared: true})
	if err != nil {
		b.Fatal(err)
	}
	if prep.pool == nil {
		b.Skip("no sandboxes are prepared here (no sandbox or no first program)")
	}
	defer prep.pool.close()
	built, err := newBash(Config{Workspace: ws, Sandbox: ModeRequire})
	if err != nil {
		b.Fatal(err)
	}
	truePath, err := exec.LookPath("true")
	if err == nil {
		truePath, err = filepath.EvalSymlinks(truePath)
	}
	if err != nil {
		b.Fatal(err)
	}
	decision := &policy.Decision{Action: policy.Allow, Rule: "bench", Rendered: true, Command: "true", Programs: []string{truePath}}
	args := json.RawMessage(`{"command":"true"}`)
	call := func(t *tools.Tool) func() {
		return func() {
			out, err := t.Handler.Handle(context.Background(), &tools.Call{Name: "bash", Arguments: args, Decision: decision})
			if err != nil || out.IsError {
				b.Fatalf("%+v %v", out, err)
			}
		}
	}
	prepTool, builtTool := prep.tool(), built.tool()
	call(prepTool)()
	call(prepTool)() // the view's second call prepares
	prep.pool.wg.Wait()
	used0 := prep.pool.used.Load()
	bare := func() {
		if out, err := exec.Command(bareBwrap[0], bareBwrap[1:]...).CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
	}
	var walls [3][]time.Duration
	var cpus [3]time.Duration
	measure := func(i int, fn func(), after func()) {
		c0, t0 := cpuProcess(), time.Now()
		fn()
		walls[i] = append(walls[i], time.Since(t0))
		if after != nil {
			after()
		}
		cpus[i] += cpuProcess() - c0
	}
	for b.Loop() {
		measure(0, call(prepTool), prep.pool.wg.Wait)
		measure(1, call(builtTool), nil)
		measure(2, bare, nil)
	}
	if hits := prep.pool.used.Load() - used0; hits != int64(b.N) {
		b.Errorf("%d of %d calls ran in a prepared sandbox", hits, b.N)
	}
	n := float64(b.N)
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2]) / float64(time.Millisecond)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / n }
	b.ReportMetric(p50(walls[0]), "prepared-p50-ms")
	b.ReportMetric(p50(walls[1]), "built-p50-ms")
	b.ReportMetric(p50(walls[2]), "bwrap-p50-ms")
	b.ReportMetric(ms(cpus[0]), "prepared-cpu-ms/call")
	b.ReportMetric(ms(cpus[1]), "built-cpu-ms/call")
	b.ReportMetric(ms(cpus[2]), "bwrap-cpu-ms/call")
	b.ReportMetric(p50(walls[0])/p50(walls[2]), "prepared-wall-ratio")
	b.ReportMetric(float64(cpus[0])/float64(cpus[2]), "prepared-cpu-ratio")
}
