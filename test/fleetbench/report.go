package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/pkg/events"
)

// roundResult is one round's measurements.
type roundResult struct {
	round, bin           int
	elapsed              time.Duration
	calls                []*call
	runs                 map[string]int
	cpuWorkers, cpuNodes []time.Duration
	cpuSelf, cpuMachine  time.Duration
	load                 string
	cluster              nodeCounts // what the cluster did (counts.go)
}

func (rr roundResult) rate() float64 { return float64(len(rr.calls)) / rr.elapsed.Seconds() }

// counts are the round's outcomes: calls answered, answered ok, errors
// (not answered, or answered with an error), ids appended once, not at
// all, more than once, and lines that are no call's id.
type counts struct{ answered, ok, errors, once, lost, twice, unexpected int }

func (rr roundResult) counts() counts {
	var c counts
	ids := map[string]bool{}
	for _, cl := range rr.calls {
		ids[cl.id] = true
		if cl.answered {
			c.answered++
		}
		if cl.answered && cl.status == events.StatusOK {
			c.ok++
		} else {
			c.errors++
		}
		switch n := rr.runs[cl.id]; {
		case n == 0:
			c.lost++
		case n == 1:
			c.once++
		default:
			c.twice++
		}
	}
	for id := range rr.runs {
		if !ids[id] {
			c.unexpected++
		}
	}
	return c
}

func (rr roundResult) ok() bool {
	c := rr.counts()
	return c.errors == 0 && c.once == len(rr.calls) && c.unexpected == 0
}

// pct is the p-th quantile of the calls' durations d picks.
func (rr roundResult) pct(d func(*call) time.Duration, p float64) time.Duration {
	var v []time.Duration
	for _, c := range rr.calls {
		if c.answered {
			v = append(v, d(c))
		}
	}
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[min(len(v)-1, int(float64(len(v))*p))]
}

func wait(c *call) time.Duration { return max(c.total-c.exec, 0) }
func exe(c *call) time.Duration  { return c.exec }

func perCall(d time.Duration, n int) string {
	return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000/float64(n))
}

func total(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}

func (rr roundResult) print() {
	n := len(rr.calls)
	c := rr.counts()
	tag := fmt.Sprintf("round %d [%c]", rr.round, 'A'+rr.bin)
	fmt.Printf("%s: %d calls in %.1fs: %.1f calls/s; queue wait p50 %s p90 %s; execution p50 %s p90 %s\n", tag, n, rr.elapsed.Seconds(), rr.rate(),
		fmtDur(rr.pct(wait, 0.5)), fmtDur(rr.pct(wait, 0.9)), fmtDur(rr.pct(exe, 0.5)), fmtDur(rr.pct(exe, 0.9)))
	var ws, ns []string
	for _, d := range rr.cpuWorkers {
		ws = append(ws, perCall(d, n))
	}
	for _, d := range rr.cpuNodes {
		ns = append(ns, perCall(d, n))
	}
	fmt.Printf("%s: CPU per call: workers+children %s (%s), nats-servers %s (%s), agents %s; whole machine %s; load average %s\n", tag,
		perCall(total(rr.cpuWorkers), n), strings.Join(ws, " "), perCall(total(rr.cpuNodes), n), strings.Join(ns, " "), perCall(rr.cpuSelf, n),
		perCall(rr.cpuMachine, n), rr.load)
	fmt.Printf("%s: results: %d answered, %d ok, %d errors; executions: %d once, %d lost, %d twice, %d unexpected; agents' messages beyond one per call (stored-result look-ups while waiting, publishes again): %d\n", tag,
		c.answered, c.ok, c.errors, c.once, c.lost, c.twice, c.unexpected, rr.cluster.agentIn-int64(n))
	rr.cluster.print(tag, n)
	for _, cl := range rr.calls {
		if !cl.answered || cl.status != events.StatusOK {
			fmt.Printf("%s: first failed call %s: status %q, err %v, output %q\n", tag, cl.id, cl.status, cl.err, cl.output)
			break
		}
	}
}

// summary prints each binary's rounds side by side, with the rate the
// fleet's CPU time per call (workers with their children, nodes, agents)
// allows on this machine's CPUs: a bound that other load on a shared
// machine moves less than the rate measured.
func summary(rs []roundResult, bins int) {
	fmt.Println()
	for b := range bins {
		var rate, wcpu, ncpu, e50, bound, stored, routed []string
		for _, rr := range rs {
			if rr.bin != b {
				continue
			}
			n := len(rr.calls)
			rate = append(rate, fmt.Sprintf("%.1f", rr.rate()))
			wcpu = append(wcpu, perCall(total(rr.cpuWorkers), n))
			ncpu = append(ncpu, perCall(total(rr.cpuNodes), n))
			e50 = append(e50, fmtDur(rr.pct(exe, 0.5)))
			stored = append(stored, ratio(rr.cluster.storedTotal(), n))
			routed = append(routed, ratio(rr.cluster.routed, n))
			fleet := total(rr.cpuWorkers) + total(rr.cpuNodes) + rr.cpuSelf
			bound = append(bound, fmt.Sprintf("%.0f", float64(runtime.NumCPU())*float64(n)/fleet.Seconds()))
		}
		fmt.Printf("worker %c: calls/s %s; execution p50 %s; CPU per call: workers+children %s, nats-servers %s; the fleet's CPU bounds it to %s calls/s on %d CPUs; per call: stored %s, messages between nodes %s\n", 'A'+b,
			strings.Join(rate, " "), strings.Join(e50, " "), strings.Join(wcpu, " "), strings.Join(ncpu, " "), strings.Join(bound, " "), runtime.NumCPU(),
			strings.Join(stored, " "), strings.Join(routed, " "))
	}
}

func fmtDur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}
