package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/pkg/policy"
)

func notify(c chan os.Signal) { signal.Notify(c, os.Interrupt, syscall.SIGTERM) }

// memory measures the worker's resident memory with 1,000 parked calls
// and across a bash call that prints 1 GB.
func memory(g *generator, w *proc) {
	fmt.Printf("worker memory (w1): before: %s\n", w.mem())
	// 1,000 calls the built-in policy asks a person about (rm is
	// dangerous): each parks, and the worker answers pending.
	const parked = 1000
	var wg sync.WaitGroup
	var pending, other int
	var mu sync.Mutex
	sem := make(chan struct{}, 100)
	for i := range parked {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			data, err := g.call(ctx, "toolgate", "js", "bash", fmt.Sprintf(`{"command":"rm -f parked-%d"}`, i))
			must(err)
			mu.Lock()
			defer mu.Unlock()
			if bytes.Contains(data, []byte(`"status":"pending"`)) {
				pending++
			} else if other++; other == 1 {
				fmt.Fprintf(os.Stderr, "bench: a call meant to park did not: %s\n", data)
			}
		}()
	}
	wg.Wait()
	fmt.Printf("  with %d parked calls (%d pending, %d other): %s\n", parked, pending, other, w.mem())

	// A bash call printing 1 GB: the worker keeps a bounded part.
	rss0, _ := memOf(w.cmd.Process.Pid)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var peak int64
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
				if r, _ := memOf(w.cmd.Process.Pid); r > peak {
					peak = r
				}
			}
		}
	}()
	t0 := time.Now()
	out, err := g.call(ctx, "toolgate", "js", "bash", `{"command":"seq 1 130000000 | head -c 1000000000"}`)
	close(done)
	must(err)
	status := "?"
	if i := bytes.Index(out, []byte(`"status":"`)); i >= 0 {
		status, _, _ = strings.Cut(string(out[i+10:]), `"`)
	}
	if status != "ok" {
		fmt.Fprintf(os.Stderr, "bench: the 1 GB call: %s\n", out)
	}
	rss1, _ := memOf(w.cmd.Process.Pid)
	fmt.Printf("  bash printing 1 GB (status %s, %d bytes of result, %s): RSS before %s, sampled peak during %s, after %s\n\n",
		status, len(out), time.Since(t0).Round(time.Second), mib(rss0), mib(peak), mib(rss1))
}

// gateCost measures the built-in policy's decision on a plain tool and on
// a five-command pipeline, with allocations.
func gateCost() {
	ws, err := os.MkdirTemp("", "toolgate-bench-gate-")
	must(err)
	defer os.RemoveAll(ws)
	must(os.WriteFile(ws+"/main.go", []byte("package main\n"), 0o644))
	g := policy.NewGate(policy.Default())
	for _, c := range []struct {
		name string
		req  policy.Request
	}{
		{"plain tool (ls, no path)", policy.Request{Agent: agent, Tool: "ls", Known: true, Kind: policy.KindRead, Workspace: ws}},
		{"5-command pipeline (bash)", policy.Request{Agent: agent, Tool: "bash", Known: true, Kind: policy.KindExecute, Workspace: ws,
			Arguments: map[string]any{"command": `cat main.go | grep -n func | grep -v test | sort | wc -l`}}},
	} {
		d := g.Evaluate(context.Background(), c.req)
		r := testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				g.Evaluate(context.Background(), c.req)
			}
		})
		fmt.Printf("policy decision, %s -> %s: %d ns/op, %d B/op, %d allocs/op\n", c.name, d.Action, r.NsPerOp(), r.AllocedBytesPerOp(), r.AllocsPerOp())
	}
}

// cpuOf is the CPU time (user and system, all threads, and its reaped
// children's: a bash call's sandbox) process pid has
// used, in clock ticks' resolution.
func cpuOf(pid int) time.Duration {
	t, err := statCPU(pid)
	must(err)
	return t
}

// statCPU is cpuOf, or the error reading it (the process is gone).
func statCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces), from field 3.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	var t int64
	for _, i := range []int{11, 12, 13, 14} { // utime, stime, and its reaped children's
		v, _ := strconv.ParseInt(f[i], 10, 64)
		t += v
	}
	return time.Duration(t) * time.Second / clockTicks, nil
}

// cpuTree is cpuOf summed over pid and every process under it still
// running: what the worker's sandboxes that outlive a call (a sandbox
// template and the calls it reaps) have used too. A process reaped
// between two readings moves its time to its reaper's, which is in the
// tree: the difference of two readings counts each process once.
func cpuTree(pid int) time.Duration {
	t, err := statCPU(pid)
	if err != nil {
		return 0 // gone since its parent listed it: its reaper counts it
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		if err != nil {
			continue
		}
		for _, c := range strings.Fields(string(b)) {
			if child, err := strconv.Atoi(c); err == nil {
				t += cpuTree(child)
			}
		}
	}
	return t
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// every Linux architecture Go supports).
const clockTicks = 100

// cpuSelf is the CPU time this process has used.
func cpuSelf() time.Duration {
	var ru syscall.Rusage
	must(syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuacctRun moves this process into a cpuacct cgroup (v1) of its own and
// returns the clock of the CPU time of every process in it: this one and
// all it starts from now on, reaped or not, in nanoseconds, counting what
// the processes' own times (/proc, getrusage) miss (a sandbox's teardown).
// Without the hierarchy the clock reads 0.
func cpuacctRun() func() time.Duration {
	root := "/sys/fs/cgroup/cpuacct"
	// Those of runs that ended (empty: rmdir refuses the others).
	old, _ := filepath.Glob(filepath.Join(root, "toolgate-bench-*"))
	for _, o := range old {
		_ = os.Remove(o)
	}
	dir := filepath.Join(root, fmt.Sprintf("toolgate-bench-%d", os.Getpid()))
	if os.Mkdir(dir, 0o755) != nil {
		return func() time.Duration { return 0 }
	}
	if os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0) != nil {
		_ = os.Remove(dir)
		return func() time.Duration { return 0 }
	}
	return func() time.Duration {
		b, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage"))
		must(err)
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		must(err)
		return time.Duration(n)
	}
}
