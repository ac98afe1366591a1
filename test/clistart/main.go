// Command clistart measures how long the command line programs take to
// start: `toolctl --help`, `toolctl creds agent X` and `worker --help`,
// beside `/bin/true` for the cost of a process at all.
//
//	go run ./test/clistart -n 40 -bin old=DIR -bin new=DIR
//
// Each DIR holds a toolctl and a worker binary (go build -o DIR/
// ./cmd/toolctl ./cmd/worker); without -bin the programs are built from
// this tree. The runs alternate: every round runs each command once with
// every DIR, the DIRs' order turning each round, so that other load on a
// shared machine falls on all of them alike. For each command and DIR it
// prints the CPU time per run (user plus system, from the kernel's
// accounting of the child: steadier than the wall time when the machine is
// shared), the wall time's p10, p50 and p90, the minor page faults and the
// largest resident set per run.
//
// `creds agent X` mints into a state directory of its own
// (TOOLGATE_STATE_DIR), whose keys a first run, not counted, creates.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

// bins is the repeated -bin NAME=DIR flag.
type bins []struct{ name, dir string }

func (b *bins) String() string { return fmt.Sprint(*b) }

func (b *bins) Set(v string) error {
	name, dir, ok := strings.Cut(v, "=")
	if !ok || name == "" || dir == "" {
		return fmt.Errorf("want NAME=DIR, got %q", v)
	}
	*b = append(*b, struct{ name, dir string }{name, dir})
	return nil
}

// sample is one run's cost.
type sample struct {
	wall, cpu time.Duration
	minflt    int64
	maxrss    int64 // KiB
}

func main() {
	if err := measure(os.Args[1:], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// measure runs the measurement args ask for and prints its table to out.
func measure(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("clistart", flag.ContinueOnError)
	n := fs.Int("n", 40, "runs of each command with each -bin")
	var bs bins
	fs.Var(&bs, "bin", "NAME=DIR: a directory holding toolctl and worker binaries (repeated; default: built from this tree)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 1 {
		return fmt.Errorf("-n %d: want at least 1", *n)
	}
	tmp, err := os.MkdirTemp("", "clistart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if len(bs) == 0 {
		dir := filepath.Join(tmp, "bin")
		build := exec.Command("go", "build", "-o", dir+"/", "github.com/toolgate/toolgate/cmd/toolctl", "github.com/toolgate/toolgate/cmd/worker")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build: %w", err)
		}
		bs = bins{{"this", dir}}
	}
	state := filepath.Join(tmp, "state")
	creds := filepath.Join(tmp, "X.creds")
	env := append(os.Environ(), "TOOLGATE_STATE_DIR="+state)
	type command struct {
		label string
		argv  func(dir string) []string
	}
	cmds := []command{
		{"/bin/true", func(string) []string { return []string{"/bin/true"} }},
		{"toolctl --help", func(d string) []string { return []string{filepath.Join(d, "toolctl"), "--help"} }},
		{"toolctl creds agent X", func(d string) []string {
			return []string{filepath.Join(d, "toolctl"), "creds", "agent", "X", "--out", creds}
		}},
		{"worker --help", func(d string) []string { return []string{filepath.Join(d, "worker"), "--help"} }},
	}
	// The first mint creates the install's keys: not what is measured.
	if _, err := run(cmds[2].argv(bs[0].dir), env); err != nil {
		return fmt.Errorf("first mint: %w", err)
	}
	res := make(map[[2]int][]sample)
	for r := range *n {
		for ci, c := range cmds {
			for k := range bs {
				bi := (k + r) % len(bs)
				s, err := run(c.argv(bs[bi].dir), env)
				if err != nil {
					return fmt.Errorf("%s (%s): %w", c.label, bs[bi].name, err)
				}
				res[[2]int{ci, bi}] = append(res[[2]int{ci, bi}], s)
			}
		}
	}
	var load [3]float64
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Sscan(string(b), &load[0], &load[1], &load[2])
	}
	fmt.Fprintf(out, "%d runs each, alternated; GOMAXPROCS %d; load average %.2f %.2f %.2f at the end\n\n",
		*n, runtime.GOMAXPROCS(0), load[0], load[1], load[2])
	fmt.Fprintln(out, "| command | binaries | CPU per run | wall p10 / p50 / p90 | minor faults | max RSS |")
	fmt.Fprintln(out, "| --- | --- | ---: | ---: | ---: | ---: |")
	for ci, c := range cmds {
		for bi, b := range bs {
			ss := res[[2]int{ci, bi}]
			var cpu time.Duration
			var flt, rss int64
			walls := make([]time.Duration, len(ss))
			for i, s := range ss {
				cpu += s.cpu
				flt += s.minflt
				rss = max(rss, s.maxrss)
				walls[i] = s.wall
			}
			slices.Sort(walls)
			q := func(p float64) string { return ms(walls[int(p*float64(len(walls)-1))]) }
			fmt.Fprintf(out, "| `%s` | %s | %s ms | %s / %s / %s ms | %d | %.1f MB |\n", c.label, b.name,
				ms(cpu/time.Duration(len(ss))), q(0.1), q(0.5), q(0.9), flt/int64(len(ss)), float64(rss)/1024)
		}
	}
	return nil
}

// run runs argv once with env and returns its cost.
func run(argv []string, env []string) (sample, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if err != nil {
		return sample{}, err
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return sample{wall: wall, cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}, nil
	}
	return sample{
		wall:   wall,
		cpu:    cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(),
		minflt: ru.Minflt,
		maxrss: ru.Maxrss,
	}, nil
}

// ms formats d in milliseconds with one decimal.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
