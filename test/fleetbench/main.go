// Command fleetbench measures a fleet's bash calls: a 3-node NATS
// cluster, three workers and many agents, as in a deployment.
//
//	go run ./test/fleetbench -n 3000 -agents 120 -rounds 2
//	go run ./test/fleetbench -worker /tmp/before,/tmp/after -rounds 4
//
// The cluster is three nats-server processes (built from the module
// version in go.mod) configured from deploy/nats/cluster-node.conf and
// the auth.conf of `toolctl nats-config`, as test/cluster_e2e_test.go does.
// Three worker processes (-worker, default: go build ./cmd/worker), each
// connected to a different node, run with --replicas 3, the sandbox
// required, on one shared workspace and a policy that allows echo in
// allowlist mode (see policyYAML). The agents (-agents, credentials
// minted with `toolctl creds agent ... --out-dir`) each connect to a
// node in turn and make their share of -n calls
// `echo <call id> >> <agent>.log` through pkg/client, -inflight at a
// time (default: all of them at once, so the whole load is queued within
// a moment).
//
// Each round starts the workers afresh; with two worker binaries the
// rounds alternate between them so that before and after are measured in
// one run on the same cluster. A round reports calls/s; p50 and p90 of
// the queue wait and of the execution, where the execution is the
// result's duration_ms (the worker's handling, from the delivered message
// to the result) and the queue wait is the rest of the client's time
// from the publish to the result; the CPU per call of the workers with
// all their descendants (bwrap and everything in the sandbox) and of the
// nats-servers, from a cpuacct cgroup each (see cpuGroups); the
// whole machine's; the load average; and the executions counted in the
// files: every id appended exactly once; and what the cluster did per
// call, from the nodes' monitoring endpoints (counts.go): the messages
// each stream stored, the calls delivered, the JetStream API requests,
// and the messages the workers, the agents and the nodes sent. The
// summary adds the rate the fleet's CPU per call allows on this
// machine's CPUs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// policyYAML allows bash in allowlist mode with echo its one safe
// program, and writes (a redirection into a file is judged as one):
// `echo ID >> FILE` into the workspace is allowed by the gate itself, so
// the execute allowlist applies to it, as it does to the commands a
// fleet's policy allows.
const policyYAML = `allow: [bash, write]
exec:
  security: allowlist
  ask: off
  safe_bins: [echo]
`

// config is the bench's flags.
type config struct {
	n, agents, inflight, rounds int
	workers                     []string
	natsServer, toolctl         string
	nodeConf                    string
	concurrency, agentConc      int
	callTimeout                 time.Duration
	keep                        bool
}

func main() {
	var c config
	flag.IntVar(&c.n, "n", 3000, "calls per round, over all agents")
	flag.IntVar(&c.agents, "agents", 120, "agents, each with credentials of its own")
	flag.IntVar(&c.inflight, "inflight", 0, "calls in flight per agent (default: the agent's whole share at once)")
	flag.IntVar(&c.rounds, "rounds", 2, "rounds; with two worker binaries they alternate")
	workers := flag.String("worker", "", "worker binary, or two comma-separated (before,after) measured in alternate rounds (default: go build ./cmd/worker)")
	flag.StringVar(&c.natsServer, "nats-server", "", "nats-server binary (default: go build the module version in go.mod)")
	flag.StringVar(&c.nodeConf, "node-conf", "", "a node's configuration, each node's made from it as from the shipped one (default: deploy/nats/cluster-node.conf)")
	flag.StringVar(&c.toolctl, "toolctl", "", "toolctl binary minting the cluster's auth and the credentials (default: go build ./cmd/toolctl)")
	flag.IntVar(&c.concurrency, "concurrency", 0, "workers' --concurrency (0: their default)")
	flag.IntVar(&c.agentConc, "agent-concurrency", 0, "workers' --agent-concurrency (0: their default)")
	flag.DurationVar(&c.callTimeout, "call-timeout", 15*time.Minute, "how long an agent waits for one result")
	flag.BoolVar(&c.keep, "keep", false, "keep the bench's directory (logs, workspace, configuration)")
	flag.Parse()
	if *workers != "" {
		c.workers = strings.Split(*workers, ",")
	}
	if c.n < 1 || c.agents < 1 || c.rounds < 1 || len(c.workers) > 2 {
		fmt.Fprintln(os.Stderr, "fleetbench: -n, -agents and -rounds must be positive, -worker names at most two binaries")
		os.Exit(2)
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		os.Exit(1)
	}
}

func run(c config) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "toolgate-fleet-")
	if err != nil {
		return err
	}
	if c.keep {
		fmt.Fprintf(os.Stderr, "fleetbench: keeping %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	// The commands run as the workspace's owner, who must reach it.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	groups = newCPUGroups()
	defer groups.remove()
	if c.natsServer == "" {
		if c.natsServer, err = build(root, dir, "nats-server", "github.com/nats-io/nats-server/v2"); err != nil {
			return err
		}
	}
	if c.toolctl == "" {
		if c.toolctl, err = build(root, dir, "toolctl", "./cmd/toolctl"); err != nil {
			return err
		}
	}
	if len(c.workers) == 0 {
		w, err := build(root, dir, "worker", "./cmd/worker")
		if err != nil {
			return err
		}
		c.workers = []string{w}
	}
	for i, w := range c.workers {
		if c.workers[i], err = filepath.Abs(w); err != nil {
			return err
		}
	}

	// The install: its keys in a state directory of the bench's own.
	env := append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, identity.EnvStateDir+"=") || strings.HasPrefix(kv, identity.EnvCreds+"=")
	}), identity.EnvStateDir+"="+filepath.Join(dir, "state"))
	cfgDir, agentDir := filepath.Join(dir, "nats-config"), filepath.Join(dir, "agents")
	if err := toolctl(c.toolctl, env, "nats-config", "--out", cfgDir); err != nil {
		return err
	}
	names := make([]string, c.agents)
	for i := range names {
		names[i] = fmt.Sprintf("agent-%03d", i+1)
	}
	if err := toolctl(c.toolctl, env, append(append([]string{"creds", "agent"}, names...), "--out-dir", agentDir)...); err != nil {
		return err
	}
	if c.nodeConf == "" {
		c.nodeConf = filepath.Join(root, "deploy", "nats", "cluster-node.conf")
	}
	shipped, err := os.ReadFile(c.nodeConf)
	if err != nil {
		return err
	}
	auth, err := os.ReadFile(filepath.Join(cfgDir, "auth.conf"))
	if err != nil {
		return err
	}
	nodes, urls, mons, err := startCluster(c.natsServer, dir, string(shipped), string(auth))
	if err != nil {
		return err
	}
	defer func() {
		for _, n := range nodes {
			n.stop(20 * time.Second)
		}
	}()

	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		return err
	}
	if os.Getuid() == 0 { // a root worker runs bash as the workspace's owner, never as root
		if err := os.Chown(ws, 1000, 1000); err != nil {
			return err
		}
	}
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(policyYAML), 0o644); err != nil {
		return err
	}
	fl := &fleet{cfg: c, dir: dir, ws: ws, policy: pol, creds: filepath.Join(cfgDir, "worker.creds"), urls: urls, mons: mons, env: env, nodes: nodes}

	agents, err := connectAgents(agentDir, names, urls)
	if err != nil {
		return err
	}
	defer func() {
		for _, a := range agents {
			a.nc.Close()
		}
	}()

	inflight := c.inflight
	if inflight <= 0 {
		inflight = (c.n + c.agents - 1) / c.agents
	}
	how := "cgroup v1 cpuacct groups (every descendant counted)"
	if !groups.available() {
		how = "/proc/PID/stat with cutime+cstime (no cpuacct hierarchy: misses the sandbox's processes that bubblewrap does not reap)"
	}
	fmt.Printf("fleetbench: %d CPUs, %s; 3 nats-server nodes, 3 workers (sandbox required), %d agents, %d calls per round, %d in flight per agent; worker concurrency %s, agent concurrency %s\n",
		runtime.NumCPU(), runtime.Version(), c.agents, c.n, inflight, orDefault(c.concurrency), orDefault(c.agentConc))
	fmt.Printf("CPU time of workers and nodes: %s\n", how)
	for i, w := range c.workers {
		fmt.Printf("worker %c: %s\n", 'A'+i, w)
	}
	var results []roundResult
	for r := range c.rounds {
		bin := r % len(c.workers)
		rr, err := fl.round(r+1, bin, agents, inflight)
		if err != nil {
			return err
		}
		rr.print()
		results = append(results, rr)
	}
	summary(results, len(c.workers))
	for _, rr := range results {
		if !rr.ok() {
			return errors.New("calls failed or did not run exactly once (see above)")
		}
	}
	return nil
}

func orDefault(v int) string {
	if v == 0 {
		return "default"
	}
	return strconv.Itoa(v)
}

// moduleRoot is the directory of toolgate's go.mod, above the working
// directory.
func moduleRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/toolgate/toolgate\n") {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", errors.New("run it inside the toolgate module")
		}
		d = up
	}
}

// build builds pkg of the module at root into dir/name.
func build(root, dir, name, pkg string) (string, error) {
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

func toolctl(bin string, env []string, args ...string) error {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("toolctl %s: %w\n%s", args[0], err, b)
	}
	return nil
}

// agent is one agent's connection and client.
type agent struct {
	name string
	nc   *nats.Conn
	c    *client.Client
}

// connectAgents connects each agent with its credentials to a node in
// turn.
func connectAgents(dir string, names, urls []string) ([]*agent, error) {
	var out []*agent
	for i, n := range names {
		f := filepath.Join(dir, n+".creds")
		name, opts, err := client.Credentials(f)
		if err != nil {
			return out, err
		}
		nc, err := nats.Connect(urls[i%len(urls)], append(opts, nats.Name(name), nats.MaxReconnects(-1))...)
		if err != nil {
			return out, fmt.Errorf("connect %s: %w", name, err)
		}
		a := &agent{name: name, nc: nc}
		out = append(out, a)
		if a.c, err = client.New(nc, name, client.WithCredsTrust(f)); err != nil {
			return out, err
		}
	}
	return out, nil
}

// fleet is the cluster and what its workers are started with.
type fleet struct {
	cfg                    config
	dir, ws, policy, creds string
	urls, mons, env        []string // the nodes' client and monitoring URLs
	nodes                  []*proc
}

// startWorkers starts one worker of binary bin per node, one after the
// other (the first provisions the streams).
func (f *fleet) startWorkers(round, bin int) ([]*proc, error) {
	var ws []*proc
	for i, url := range f.urls {
		name := fmt.Sprintf("w%d", i+1)
		args := []string{"--nats", url, "--creds", f.creds, "--replicas", "3", "--sandbox", "require",
			"--workspace", f.ws, "--policy", f.policy, "--name", name, "--data", filepath.Join(f.dir, "data-"+name)}
		if f.cfg.concurrency != 0 {
			args = append(args, "--concurrency", strconv.Itoa(f.cfg.concurrency))
		}
		if f.cfg.agentConc != 0 {
			args = append(args, "--agent-concurrency", strconv.Itoa(f.cfg.agentConc))
		}
		cmd := exec.Command(f.cfg.workers[bin], args...)
		cmd.Env = f.env
		start := time.Now()
		p, err := startProc(name, cmd, filepath.Join(f.dir, fmt.Sprintf("round%d-%s.log", round, name)), "worker taking calls")
		if err == nil {
			// From the exec to the worker's "taking calls": its start on
			// a healthy cluster (the first round's first worker also
			// provisions the streams and buckets).
			fmt.Fprintf(os.Stderr, "round %d [%c]: %s taking calls %.2fs after its start\n", round, 'A'+bin, name, time.Since(start).Seconds())
		}
		if err != nil {
			for _, w := range ws {
				w.stop(time.Minute)
			}
			return nil, err
		}
		ws = append(ws, p)
	}
	return ws, nil
}

// call is one call's outcome as its agent saw it.
type call struct {
	id, file string
	total    time.Duration // publish to result
	exec     time.Duration // the result's duration_ms
	err      error
	status   events.Status
	output   string
	answered bool
}

// round runs one round with worker binary bin.
func (f *fleet) round(r, bin int, agents []*agent, inflight int) (roundResult, error) {
	rr := roundResult{round: r, bin: bin}
	workers, err := f.startWorkers(r, bin)
	if err != nil {
		return rr, err
	}
	var pids []string
	for i, w := range workers {
		pids = append(pids, fmt.Sprintf("%s pid %d (node %c)", w.name, w.pid(), 'a'+i))
	}
	fmt.Fprintf(os.Stderr, "round %d: worker %c: %s\n", r, 'A'+bin, strings.Join(pids, ", "))

	// Every agent's share of the calls, the remainder to the first ones.
	calls := make([][]*call, len(agents))
	for i := range f.cfg.n {
		a := i % len(agents)
		id := fmt.Sprintf("%s-r%d-%05d", agents[a].name, r, i)
		calls[a] = append(calls[a], &call{id: id, file: fmt.Sprintf("r%d-%s.log", r, agents[a].name)})
	}
	c0, err := readCounts(f.mons)
	if err != nil {
		return rr, fmt.Errorf("read the nodes' counts: %w", err)
	}
	w0, n0, s0, m0 := cpuOf(workers), cpuOf(f.nodes), cpuSelf(), cpuMachine()
	start := time.Now()
	var wg sync.WaitGroup
	for a, ag := range agents {
		next := make(chan *call, len(calls[a]))
		for _, c := range calls[a] {
			next <- c
		}
		close(next)
		for range min(inflight, len(calls[a])) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for c := range next {
					ctx, cancel := context.WithTimeout(context.Background(), f.cfg.callTimeout)
					t0 := time.Now()
					res, err := ag.c.Call(ctx, "bash", map[string]any{"command": "echo " + c.id + " >> " + c.file}, client.WithID(c.id))
					c.total = time.Since(t0)
					cancel()
					c.answered, c.err = err == nil, err
					if res != nil {
						c.exec = time.Duration(res.DurationMS) * time.Millisecond
						c.status, c.output = res.Status, res.Output
						if res.IsError && res.Status == events.StatusOK {
							c.status = "error"
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	rr.elapsed = time.Since(start)
	rr.cpuWorkers, rr.cpuNodes, rr.cpuSelf = sub(cpuOf(workers), w0), sub(cpuOf(f.nodes), n0), cpuSelf()-s0
	rr.cpuMachine = cpuMachine() - m0
	rr.load = loadavg()
	c1, err := readCounts(f.mons)
	if err != nil {
		return rr, fmt.Errorf("read the nodes' counts: %w", err)
	}
	rr.cluster = c1.since(c0)
	for _, w := range workers {
		w.stop(time.Minute)
	}
	for _, cs := range calls {
		rr.calls = append(rr.calls, cs...)
	}
	rr.runs, err = countRuns(f.ws, r, agents)
	return rr, err
}

func sub(a, b []time.Duration) []time.Duration {
	out := make([]time.Duration, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}

// countRuns reads round r's files: how many times each id was appended.
func countRuns(ws string, r int, agents []*agent) (map[string]int, error) {
	runs := map[string]int{}
	for _, a := range agents {
		b, err := os.ReadFile(filepath.Join(ws, fmt.Sprintf("r%d-%s.log", r, a.name)))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, l := range strings.Fields(string(b)) {
			runs[l]++
		}
	}
	return runs, nil
}

// groups holds the CPU time of the workers and nodes, with all their
// descendants'.
var groups = &cpuGroups{}

// cpuOf is each process's CPU time with its descendants': from its
// cpuacct group, else (utime+stime+cutime+cstime of /proc/PID/stat) its
// own and its waited-for children's.
func cpuOf(ps []*proc) []time.Duration {
	out := make([]time.Duration, len(ps))
	for i, p := range ps {
		if groups.available() {
			out[i] = groups.usage(p.name)
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid()))
		if err != nil {
			continue
		}
		// The fields after the command's closing parenthesis.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		var ticks int64
		for _, k := range []int{11, 12, 13, 14} { // utime stime cutime cstime: fields 14-17, from 3
			v, _ := strconv.ParseInt(f[k], 10, 64)
			ticks += v
		}
		out[i] = time.Duration(ticks) * time.Second / clockTicks
	}
	return out
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// cpuSelf is this process's CPU time: the agents' side.
func cpuSelf() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuMachine is the CPU time the whole machine spent busy (every CPU's
// time but idle and iowait, from /proc/stat): what the per-process
// figures should add up to on an otherwise idle machine.
func cpuMachine() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var ticks int64
	for i, f := range strings.Fields(line)[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		v, _ := strconv.ParseInt(f, 10, 64)
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
