//go:build linux

package bash

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// treeCPU is a clock of the CPU time of this process and of every process
// it starts, reaped or not (a sandbox template and the calls it forks
// are reaped only by the template): a cpuacct cgroup (v1) of the
// benchmark's own, which the process moves into; nil when there is none
// to make.
func treeCPU(b *testing.B) func() time.Duration {
	root := "/sys/fs/cgroup/cpuacct"
	if _, err := os.Stat(filepath.Join(root, "cpuacct.usage")); err != nil {
		return nil
	}
	dir := filepath.Join(root, "toolgate-bench-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		_ = os.Remove(dir)
		return nil
	}
	b.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
		for range 100 {
			if os.Remove(dir) == nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	return func() time.Duration {
		v, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage"))
		if err != nil {
			b.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		return time.Duration(n)
	}
}

// BenchmarkPreparedVsBwrap alternates, call by call in one run, a
// sandboxed call of "true" restricted to its program (as a gate that
// resolved it leaves it) served by a sandbox template (template.go;
// where the machine has none, that side is left out), the same call in
// a sandbox prepared ahead for it alone (Config.Prepared with
// NoTemplate), the same call with its sandbox built on its path, and
// bare bwrap (bareBwrap). It reports the p50 wall time of each and the
// CPU time per call of the whole process tree (a cpuacct cgroup of its
// own where it can make one, else this process and its reaped children,
// which miss a template's calls): for the prepared call, from its start
// until the sandbox replacing the one it took is ready (the preparation
// is the call's cost, made off its path).
func BenchmarkPreparedVsBwrap(b *testing.B) {
	testenv.LookPath(b, "bwrap", "bubblewrap")
	// Before anything starts: what is started before stays outside.
	clock := treeCPU(b)
	if clock == nil {
		b.Logf("no cpuacct cgroup: CPU is this process's and its reaped children's")
		clock = cpuProcess
	}
	ws := ownedWorkspace(b)
	defer useSmallInit(b)()
	prep, err := newBash(Config{Workspace: ws, Sandbox: ModeRequire, Prepared: true, NoTemplate: true})
	if err != nil {
		b.Fatal(err)
	}
	if prep.pool == nil {
		b.Skip("no sandboxes are prepared here (no sandbox or no first program)")
	}
	defer prep.pool.close()
	tmpl, err := newBash(Config{Workspace: ws, Sandbox: ModeRequire, Prepared: true})
	if err != nil {
		b.Fatal(err)
	}
	defer tmpl.pool.close()
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
	prepTool, builtTool, tmplTool := prep.tool(), built.tool(), tmpl.tool()
	for _, t := range []*bash{prep, tmpl} {
		call(t.tool())()
		call(t.tool())() // the view's second call prepares
		t.pool.wg.Wait()
	}
	templated := tmpl.pool.tmpl && len(tmpl.pool.templates) == 1
	if !templated {
		b.Logf("no sandbox template here (template mode %v): that side is left out", tmpl.pool.tmpl)
	}
	used0, tused0 := prep.pool.used.Load(), tmpl.pool.used.Load()
	bare := func() {
		if out, err := exec.Command(bareBwrap[0], bareBwrap[1:]...).CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
	}
	// The second clock: this process, its reaped children and the
	// template's process with those it reaped (/proc's times, in ticks).
	rusage := func() time.Duration {
		d := cpuProcess()
		for _, pid := range tmpl.pool.templatePids() {
			if t, err := procCPU(pid); err == nil {
				d += t
			}
		}
		return d
	}
	var walls [4][]time.Duration
	var cpus, rus [4]time.Duration
	measure := func(i int, fn func(), after func()) {
		c0, r0, t0 := clock(), rusage(), time.Now()
		fn()
		walls[i] = append(walls[i], time.Since(t0))
		if after != nil {
			after()
		}
		cpus[i] += clock() - c0
		rus[i] += rusage() - r0
	}
	for b.Loop() {
		if templated {
			measure(3, call(tmplTool), nil)
		}
		measure(0, call(prepTool), prep.pool.wg.Wait)
		measure(1, call(builtTool), nil)
		measure(2, bare, nil)
	}
	if hits := prep.pool.used.Load() - used0; hits != int64(b.N) {
		b.Errorf("%d of %d calls ran in a prepared sandbox", hits, b.N)
	}
	if hits := tmpl.pool.used.Load() - tused0; templated && hits != int64(b.N) {
		b.Errorf("%d of %d calls ran in a sandbox template", hits, b.N)
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
	b.ReportMetric(ms(rus[0]), "prepared-rusage-ms/call")
	b.ReportMetric(ms(rus[2]), "bwrap-rusage-ms/call")
	if templated {
		b.ReportMetric(ms(rus[3]), "template-rusage-ms/call")
		b.ReportMetric(p50(walls[3]), "template-p50-ms")
		b.ReportMetric(ms(cpus[3]), "template-cpu-ms/call")
		b.ReportMetric(p50(walls[3])/p50(walls[2]), "template-wall-ratio")
		b.ReportMetric(float64(cpus[3])/float64(cpus[2]), "template-cpu-ratio")
	}
}

// procCPU is the CPU time of process pid and of the children it reaped
// (/proc/pid/stat, in clock ticks of 1/100 s).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	var t int64
	for _, i := range []int{11, 12, 13, 14} {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		t += v
	}
	return time.Duration(t) * 10 * time.Millisecond, nil
}
