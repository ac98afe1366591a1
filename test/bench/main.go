// Command bench measures toolgate end to end against the raw JetStream
// pattern it is built on, both in the same run, with the same client:
//
//	go run ./test/bench -n 3000 -rounds 3
//
// One NATS server with JetStream runs in this process. The worker under
// test is the real cmd/worker binary, at its defaults (the built-in policy,
// the built-in tools), connected to that server; the raw pattern's worker is
// this program run again as a second process. The load generator is the
// same for both sides: binary CloudEvents calls of `read` on a 1 KiB file
// (a pure tool: run without a claim record; -tool write writes 1 KiB to
// one of 64 files instead, a call with effects, claimed first),
// published either plainly (core NATS publish, the stream stores them) or
// with a JetStream publish awaiting its ack, and every result received on
// ONE wildcard subscription. Latency is from the publish to the result.
//
// The raw pattern is what toolgate needs of JetStream and nothing else: a
// work-queue stream, a durable pull consumer (Consume, 64 buffered) handing
// messages to a pool of 64, a KV create per call, the result persisted with
// a Nats-Msg-Id and its ack awaited, then the message acked.
//
// Authentication is on unless -auth=false: the server runs in operator
// mode trusting a fresh install, as the worker's embedded server does, and
// every connection of both sides authenticates with a user JWT (the worker
// with worker credentials, the load generator with the agent role's
// permissions plus the raw pattern's subjects, the raw worker with its
// own least-privilege user). Besides rates and latencies it reports the
// CPU time each side's worker process and this process (the server and
// the load generator) spent per call, which moves less than rates when
// the machine is shared.
//
// A third side, bus (-bus, on by default), is the raw pattern carrying
// toolgate's messages: toolgate's result event and its audit event
// per call, and no tool work (see bus.go). Its calls/s bound what toolgate
// can reach with its message pattern: toolgate/bus is what toolgate's own
// handling of a call costs, bus/raw what its messages cost.
//
// A fourth side, embedded (-embedded, on by default), is toolgate as a
// fresh install runs it and as the goals of CPU per call count it: the
// worker started without --nats runs its own embedded server, and the
// load generator connects to it as an agent (see embedded.go). Its
// worker CPU includes its server's; every process counted, it compares
// with the raw side's worker plus this process. With -baseline BIN a
// fifth side, base, is an embedded side of its own running another
// worker binary: two builds measured in the same rounds, taking turns.
// -sides limits a run to some sides (raw is always measured).
//
// The sides take turns going first within every round so that other load
// on a shared machine falls on all of them.
//
// Then: calls/s with 1, 2 and 4 workers on the one server; the worker's
// resident memory with 1,000 parked calls; its resident memory across a
// bash call printing 1 GB; and the policy gate's decision cost.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/pkg/events"
)

// roleEnv, when set to "raw" or "bus", makes this program the raw
// pattern's worker or the bus side's.
const roleEnv = "TOOLGATE_BENCH_ROLE"

const agent = "bench"

var workerEnv string

// creds issues the connections' credentials; nil without authentication.
var creds *auth

func main() {
	switch os.Getenv(roleEnv) {
	case "raw":
		rawWorker(os.Args[1], os.Args[2:])
		return
	case "bus":
		busWorker(os.Args[1], os.Args[2:])
		return
	}
	n := flag.Int("n", 3000, "calls per measurement")
	rounds := flag.Int("rounds", 3, "rounds; each measures every side at every in-flight count and publish mode")
	inflightList := flag.String("inflight", "1,64", "comma-separated calls in flight")
	workerBin := flag.String("worker", "", "worker binary (default: go build ./cmd/worker)")
	conc := flag.Int("concurrency", 0, "worker --concurrency (0: the worker's default)")
	flag.StringVar(&workerEnv, "worker-env", "", "comma-separated NAME=value set for the workers only (e.g. GOGC=200)")
	withBus := flag.Bool("bus", true, "also measure the bus side: the raw pattern carrying toolgate's messages (a result event, an audit event) with no tool work")
	scale := flag.Bool("scale", true, "measure 1, 2 and 4 workers")
	mem := flag.Bool("mem", true, "measure the worker's memory: 1,000 parked calls, a bash call printing 1 GB")
	gate := flag.Bool("gate", true, "measure the policy decision cost")
	pprofAddr := flag.String("pprof", "", "serve net/http/pprof of this process (the server and the load) on this address")
	flag.StringVar(&benchTool, "tool", "read", "the calls' tool: read (a 1 KiB file: a pure tool, run without a claim record), write (1 KiB to one of 64 files: claimed) or bash (`true` in the sandbox, beside bare bwrap: side bwrap, its CPU that of the bwrap processes)")
	flag.DurationVar(&think, "think", 0, "pause of each in-flight caller between its calls (an agent's thinking), not counted in the latency: what a call finds when the work left by the one before it is done")
	withEmbedded := flag.Bool("embedded", true, "also measure the embedded side: a worker running its own embedded server (no --nats), called by an agent connected to that server")
	onlySides := flag.String("sides", "", "comma-separated sides to measure (default every one); raw, the reference of every ratio, always")
	baseline := flag.String("baseline", "", "a second worker binary measured as side "+baseSide+", an embedded side of its own, beside -worker's in the same rounds (two builds compared in one run)")
	useAuth := flag.Bool("auth", true, "run the server in operator mode (JWT users) as the worker's embedded server does; false: no authentication")
	flag.Parse()
	// Before any worker starts: everything this run starts is counted.
	runCPU := cpuacctRun()
	if *pprofAddr != "" {
		go func() { must(http.ListenAndServe(*pprofAddr, nil)) }()
	}

	dir, err := os.MkdirTemp("", "toolgate-bench-")
	must(err)
	defer os.RemoveAll(dir)
	bin := *workerBin
	if bin == "" {
		bin = filepath.Join(dir, "worker")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/worker")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		must(cmd.Run())
	}
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(dir, "nats"), NoLog: true, NoSigs: true}
	if *useAuth {
		creds = newAuth(dir)
		creds.trust(opts)
	}
	srv, err := server.NewServer(opts)
	must(err)
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		panic("server not ready")
	}
	defer srv.Shutdown()
	url := srv.ClientURL()

	ws := filepath.Join(dir, "ws")
	must(os.MkdirAll(ws, 0o755))
	must(os.WriteFile(filepath.Join(ws, "data.txt"), data1KiB, 0o644))

	var flights []int
	for _, f := range strings.Split(*inflightList, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		must(err)
		flights = append(flights, v)
	}
	fmt.Printf("toolgate bench: %d CPUs (GOMAXPROCS %d), nats-server %s, %s, %d calls per measurement, %d rounds\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), server.VERSION, runtime.Version(), *n, *rounds)
	authName := "off (no authentication)"
	if creds != nil {
		authName = "on (operator mode, a user JWT per connection)"
	}
	what := "read of a 1 KiB file"
	switch benchTool {
	case "write":
		what = "write of 1 KiB to one of 64 files"
	case "bash":
		what = "bash `true` in the worker's sandbox, beside bare bwrap run here (" + strings.Join(bwrapArgv, " ") + ")"
	}
	fmt.Printf("call: %s, binary CloudEvents, results on one wildcard subscription; worker concurrency: %s; authentication %s\n\n", what, concName(*conc), authName)

	raw := startSelf("raw", url, func() string { return creds.raw() })
	defer raw.stop()
	all := []string{"raw", "toolgate"}
	procs := map[string]*proc{"raw": raw}
	if *withBus {
		bus := startSelf("bus", url, func() string { return creds.bus() })
		defer bus.stop()
		all = []string{"raw", "bus", "toolgate"}
		procs["bus"] = bus
	}
	if creds != nil {
		// toolgate's calls sent by an agent from the agents account, as
		// agents send them: across the accounts and the worker's intake.
		all = append(all, "agents")
	}
	if benchTool == "bash" {
		all = append(all, bwrapSide)
	}
	w1 := startWorker(bin, url, ws, dir, "w1", *conc)
	defer w1.stop()

	gen := newGenerator(url)
	defer gen.close()
	if *withEmbedded {
		embedded := map[string]string{embeddedSide: bin}
		if *baseline != "" {
			embedded[baseSide] = *baseline
		}
		for _, side := range []string{embeddedSide, baseSide} {
			if embedded[side] == "" {
				continue
			}
			emb, embURL, agentCreds := startEmbedded(embedded[side], ws, dir, side, *conc)
			defer emb.stop()
			procs[side] = emb
			all = append(all, side)
			gen.connectEmbedded(side, embURL, agentCreds)
		}
	}
	if *onlySides != "" {
		want := strings.Split(*onlySides, ",")
		all = slices.DeleteFunc(all, func(s string) bool { return s != "raw" && !slices.Contains(want, s) })
	}
	type key struct {
		side, mode string
		f          int
	}
	res := map[key][]stats{}
	for r := 0; r < *rounds; r++ {
		for _, f := range flights {
			for _, mode := range []string{"js", "core"} {
				// Each side goes first in turn.
				sides := append(slices.Clone(all[r%len(all):]), all[:r%len(all)]...)
				for _, side := range sides {
					wk := w1
					if p, ok := procs[side]; ok {
						wk = p
					}
					w0, s0, c0, a0 := cpuTree(wk.cmd.Process.Pid), cpuSelf(), cpuChildren(), runCPU()
					st := gen.run(side, mode, *n, f)
					st.cpuWorker, st.cpuServer, st.cpuRun = cpuTree(wk.cmd.Process.Pid)-w0, cpuSelf()-s0, runCPU()-a0
					if side == bwrapSide {
						// bwrap and all it started, reaped by this process.
						st.cpuWorker = cpuChildren() - c0
					}
					res[key{side, mode, f}] = append(res[key{side, mode, f}], st)
				}
			}
		}
	}
	fmt.Printf("%-9s %-5s %9s  %-24s %-26s %-26s\n", "side", "pub", "in flight", "calls/s (per round)", "p50", "p99")
	for _, f := range flights {
		for _, mode := range []string{"js", "core"} {
			for _, side := range all {
				sts := res[key{side, mode, f}]
				fmt.Printf("%-9s %-5s %9d  %-24s %-26s %-26s\n", side, mode, f, joinRates(sts), joinDur(sts, 0.5), joinDur(sts, 0.99))
			}
			rs, ts := res[key{"raw", mode, f}], res[key{"toolgate", mode, f}]
			for _, side := range []string{"toolgate", embeddedSide, baseSide} {
				es := res[key{side, mode, f}]
				if len(es) == 0 {
					continue
				}
				var thr, p50 []string
				for i := range rs {
					thr = append(thr, fmt.Sprintf("%.2f", es[i].rate()/rs[i].rate()))
					p50 = append(p50, fmt.Sprintf("%.2f", float64(es[i].pct(0.5))/float64(rs[i].pct(0.5))))
				}
				fmt.Printf("%-9s %-5s %9d  calls/s %s/raw %s; p50 %s/raw %s\n", "ratio", mode, f, side, strings.Join(thr, " "), side, strings.Join(p50, " "))
			}
			if bs := res[key{"bus", mode, f}]; len(bs) > 0 && len(ts) > 0 {
				var busRaw, tgBus []string
				for i := range rs {
					busRaw = append(busRaw, fmt.Sprintf("%.2f", bs[i].rate()/rs[i].rate()))
					tgBus = append(tgBus, fmt.Sprintf("%.2f", ts[i].rate()/bs[i].rate()))
				}
				fmt.Printf("%-9s %-5s %9d  calls/s bus/raw %s; toolgate/bus %s\n", "ratio", mode, f, strings.Join(busRaw, " "), strings.Join(tgBus, " "))
			}
			for _, side := range all {
				var wc, sc []string
				for _, s := range res[key{side, mode, f}] {
					wc = append(wc, strconv.Itoa(int(s.cpuWorker.Microseconds())/s.calls))
					sc = append(sc, strconv.Itoa(int(s.cpuServer.Microseconds())/s.calls))
				}
				fmt.Printf("%-9s %-5s %9d  CPU µs per call: worker %s; server and load generator %s\n", side, mode, f, strings.Join(wc, " "), strings.Join(sc, " "))
			}
			// Every process counted: the side's worker (with its server
			// for the embedded side) and this process.
			for _, side := range all {
				if side == "raw" || side == bwrapSide {
					continue
				}
				var tot, ratio []string
				for i, s := range res[key{side, mode, f}] {
					tot = append(tot, strconv.Itoa(int(s.cpu().Microseconds())/s.calls))
					ratio = append(ratio, fmt.Sprintf("%.2f", float64(s.cpu())/float64(rs[i].cpu())))
				}
				fmt.Printf("%-9s %-5s %9d  CPU µs per call, every process: %s; %s/raw %s\n", side, mode, f, strings.Join(tot, " "), side, strings.Join(ratio, " "))
			}
			// Every process of the run, by the cgroup's clock, which
			// also counts what the processes' own times miss.
			for _, side := range all {
				var tot []string
				for _, s := range res[key{side, mode, f}] {
					if s.cpuRun > 0 {
						tot = append(tot, strconv.Itoa(int(s.cpuRun.Microseconds())/s.calls))
					}
				}
				if len(tot) > 0 {
					fmt.Printf("%-9s %-5s %9d  CPU µs per call, every process of the run (cpuacct): %s\n", side, mode, f, strings.Join(tot, " "))
				}
			}
			fmt.Println()
		}
	}
	fmt.Printf("worker w1 after the load: %s\n\n", w1.mem())

	if *scale {
		fmt.Println("workers on one server, 64 in flight, JetStream-acked publish:")
		ws2 := []*proc{w1}
		for _, want := range []int{1, 2, 4} {
			for len(ws2) < want {
				ws2 = append(ws2, startWorker(bin, url, ws, dir, fmt.Sprintf("w%d", len(ws2)+1), *conc))
			}
			var rates []string
			for r := 0; r < *rounds; r++ {
				rates = append(rates, fmt.Sprintf("%.0f", gen.run("toolgate", "js", *n, 64).rate()))
			}
			fmt.Printf("  %d worker(s): %s calls/s\n", want, strings.Join(rates, " "))
		}
		for _, w := range ws2[1:] {
			w.stop()
		}
		fmt.Println()
	}
	if *mem {
		memory(gen, w1)
	}
	if *gate {
		gateCost()
	}
}

func concName(c int) string {
	if c == 0 {
		return "default"
	}
	return strconv.Itoa(c)
}

// stats is one measurement.
type stats struct {
	calls   int
	errors  int
	elapsed time.Duration
	lat     []time.Duration
	// CPU time spent meanwhile by the side's worker process, and by this
	// process (the server and the load generator).
	cpuWorker, cpuServer time.Duration
	// cpuRun is the CPU time of every process of the run meanwhile (a
	// cpuacct cgroup: the workers, the sandboxes and all they start,
	// reaped or not, this process); 0 without one.
	cpuRun time.Duration
}

// cpu is the CPU time of every process counted: the worker's and this
// process's.
func (s stats) cpu() time.Duration { return s.cpuWorker + s.cpuServer }

func (s stats) rate() float64 { return float64(s.calls) / s.elapsed.Seconds() }

func (s stats) pct(p float64) time.Duration {
	l := slices.Clone(s.lat)
	slices.Sort(l)
	return l[min(len(l)-1, int(float64(len(l))*p))]
}

func joinRates(sts []stats) string {
	var out []string
	for _, s := range sts {
		v := fmt.Sprintf("%.0f", s.rate())
		if s.errors > 0 {
			v += fmt.Sprintf("(%d errors)", s.errors)
		}
		out = append(out, v)
	}
	return strings.Join(out, " ")
}

func joinDur(sts []stats, p float64) string {
	var out []string
	for _, s := range sts {
		out = append(out, fmtDur(s.pct(p)))
	}
	return strings.Join(out, " ")
}

func fmtDur(d time.Duration) string {
	if d < time.Millisecond {
		return fmt.Sprintf("%dµs", d.Microseconds())
	}
	return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000)
}

// generator is the load generator both sides share: one connection, one
// wildcard result subscription per side, calls matched to waiters by id.
type generator struct {
	nc *nats.Conn
	js jetstream.JetStream
	// anc and ajs are an agent's connection in the agents account (with
	// authentication on): side "agents" sends toolgate's calls there, so
	// they cross into the toolgate account and pass the worker's intake.
	anc *nats.Conn
	ajs jetstream.JetStream
	// own are agents' connections to the servers of the workers that
	// run their own (the embedded sides), by side.
	own     map[string]sideConn
	waiters sync.Map // call id -> chan []byte
	subs    []*nats.Subscription
}

func newGenerator(url string) *generator {
	opts := []nats.Option{nats.Name("bench-load")}
	if creds != nil {
		opts = append(opts, nats.UserCredentials(creds.generator()), nats.CustomInboxPrefix(identity.InboxPrefix(identity.RoleAgent, agent)))
	}
	nc, err := nats.Connect(url, opts...)
	must(err)
	js, err := jetstream.New(nc)
	must(err)
	g := &generator{nc: nc, js: js}
	for _, subj := range []string{events.ResultsOf(agent), "bench.result." + agent + ".*", busResult + agent + ".*"} {
		sub, err := nc.Subscribe(subj, g.result)
		must(err)
		must(sub.SetPendingLimits(-1, -1))
		g.subs = append(g.subs, sub)
	}
	must(nc.Flush())
	if creds != nil {
		g.anc, err = nats.Connect(url, nats.Name("bench-agent"), nats.UserCredentials(creds.agent()),
			nats.CustomInboxPrefix(identity.InboxPrefix(identity.RoleAgent, agent)))
		must(err)
		g.ajs, err = jetstream.New(g.anc)
		must(err)
		sub, err := g.anc.Subscribe(events.ResultsOf(agent), g.result)
		must(err)
		must(sub.SetPendingLimits(-1, -1))
		g.subs = append(g.subs, sub)
		must(g.anc.Flush())
	}
	return g
}

func (g *generator) close() {
	for _, s := range g.subs {
		_ = s.Unsubscribe()
	}
	g.nc.Close()
	if g.anc != nil {
		g.anc.Close()
	}
	for _, c := range g.own {
		c.nc.Close()
	}
}

func (g *generator) result(m *nats.Msg) {
	id := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	if ch, ok := g.waiters.Load(id); ok {
		select {
		case ch.(chan []byte) <- m.Data:
		default:
		}
	}
}

// call publishes one call of tool with args and returns its result data.
// Sides "raw" and "bus" publish the same message to their own streams.
func (g *generator) call(ctx context.Context, side, mode, tool string, args string) ([]byte, error) {
	id := nuid.Next()
	cd := events.CallData{Arguments: []byte(args)}
	if tool == "bash" {
		cd.TimeoutMS = (10 * time.Minute).Milliseconds()
	}
	ev, err := events.NewCall(id, agent, cd)
	if err != nil {
		return nil, err
	}
	subject := events.CallSubject(agent, tool)
	switch side {
	case "raw":
		subject = "bench.call." + agent + "." + tool
	case "bus":
		subject = busCalls + agent + "." + tool
	}
	m, err := events.Encode(subject, ev, events.Binary)
	if err != nil {
		return nil, err
	}
	ch := make(chan []byte, 4)
	g.waiters.Store(id, ch)
	defer g.waiters.Delete(id)
	nc, js := g.nc, g.js
	switch side {
	case "agents":
		nc, js = g.anc, g.ajs
	}
	if c, ok := g.own[side]; ok {
		nc, js = c.nc, c.js
	}
	if mode == "core" {
		err = nc.PublishMsg(m)
	} else {
		_, err = js.PublishMsg(ctx, m)
	}
	if err != nil {
		return nil, err
	}
	for {
		select {
		case data := <-ch:
			if isToolgate(side) && bytes.Contains(data, []byte(`"status":"pending"`)) && tool != "bash" {
				continue
			}
			return data, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("call %s: %w", id, ctx.Err())
		}
	}
}

var readArgs = `{"path":"data.txt"}`

// data1KiB is the file every read reads and every write writes.
var data1KiB = bytes.Repeat([]byte("0123456789abcde\n"), 64)

// data1KiBJSON is data1KiB as a JSON string.
var data1KiBJSON = func() string {
	b, err := json.Marshal(string(data1KiB))
	must(err)
	return string(b)
}()

// benchTool is the tool the calls use (-tool).
var benchTool = "read"

// benchArgs returns the arguments of the i-th call of tool: read always
// reads the 1 KiB file; write writes it to one of 64 files.
func benchArgs(tool string, i int) string {
	switch tool {
	case "write":
		return `{"path":"out/` + strconv.Itoa(i%64) + `.txt","content":` + data1KiBJSON + `}`
	case "bash":
		return bashArgs
	}
	return readArgs
}

// run makes n calls with inflight at a time and measures them.
func (g *generator) run(side, mode string, n, inflight int) stats {
	lat := make([]time.Duration, n)
	var next, errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if think > 0 && i > 0 {
					time.Sleep(think) // not part of the call's latency
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				t0 := time.Now()
				var data []byte
				var err error
				if side == bwrapSide {
					err = runBwrap()
				} else {
					data, err = g.call(ctx, side, mode, benchTool, benchArgs(benchTool, i))
				}
				lat[i] = time.Since(t0)
				cancel()
				if err != nil {
					panic(err)
				}
				if isToolgate(side) && !bytes.Contains(data, []byte(`"status":"ok"`)) {
					errs.Add(1)
					if errs.Load() == 1 {
						fmt.Fprintf(os.Stderr, "bench: a call did not succeed: %s\n", data)
					}
				}
			}
		}()
	}
	wg.Wait()
	return stats{calls: n, errors: int(errs.Load()), elapsed: time.Since(start), lat: lat}
}

// proc is a child process: a worker or the raw pattern's worker.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(40 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// mem reads the process's resident memory now and at its peak.
func (p *proc) mem() string {
	rss, hwm := memOf(p.cmd.Process.Pid)
	return fmt.Sprintf("RSS %s, peak %s", mib(rss), mib(hwm))
}

func memOf(pid int) (rss, hwm int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	must(err)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = v << 10
		case "VmHWM:":
			hwm = v << 10
		}
	}
	return
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// start runs cmd and waits until a line of its output contains ready.
func start(name string, cmd *exec.Cmd, ready string) *proc {
	out, err := cmd.StderrPipe()
	must(err)
	cmd.Stdout = cmd.Stderr
	must(cmd.Start())
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	up := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		seen := false
		for sc.Scan() {
			if !seen && strings.Contains(sc.Text(), ready) {
				seen = true
				close(up)
			}
			// The bench's own workers report on lines of their own.
			if os.Getenv("BENCH_VERBOSE") != "" || strings.HasPrefix(sc.Text(), name+" worker: ") {
				fmt.Fprintf(os.Stderr, "[%s] %s\n", name, sc.Text())
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		close(p.done)
	}()
	select {
	case <-up:
	case <-p.done:
		panic(name + " exited before it was ready")
	case <-time.After(time.Minute):
		panic(name + " not ready after a minute")
	}
	return p
}

// startWorker starts worker name connected to url, or, with url empty,
// running its own embedded server on a free port.
func startWorker(bin, url, ws, dir, name string, conc int) *proc {
	args := []string{"--workspace", ws, "--data", dataDir(dir, name), "--name", name}
	if url != "" {
		args = append(args, "--nats", url)
	} else {
		args = append(args, "--listen", "127.0.0.1:0")
	}
	if conc > 0 {
		args = append(args, "--concurrency", strconv.Itoa(conc))
	}
	if creds != nil && url != "" {
		args = append(args, "--creds", creds.worker(name))
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = workerEnviron(dir, name)
	return start(name, cmd, "worker taking calls")
}

// startSelf runs this program again as the worker of role ("raw" or
// "bus"), connecting to url with credentials credsFile (if any).
func startSelf(role, url string, credsFile func() string) *proc {
	self, err := os.Executable()
	must(err)
	args := []string{url}
	if creds != nil {
		args = append(args, credsFile())
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), roleEnv+"="+role)
	return start(role, cmd, role+" worker ready")
}

// serve hands the calls of cons to a pool of 64 running handle, says
// that the role's worker is ready, and returns when the process is told
// to stop and the pool is idle.
func serve(role string, cons jetstream.Consumer, handle func(jetstream.Msg)) {
	sem := make(chan struct{}, 64)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			handle(m)
		}()
	}, jetstream.PullMaxMessages(64))
	must(err)
	fmt.Fprintln(os.Stderr, role+" worker ready")
	sig := make(chan os.Signal, 1)
	notify(sig)
	<-sig
	cc.Stop()
	for range cap(sem) {
		sem <- struct{}{}
	}
}

// rawWorker is the raw pattern's worker process.
func rawWorker(url string, credsFile []string) {
	ctx := context.Background()
	opts := []nats.Option{nats.Name("bench-raw")}
	if len(credsFile) > 0 {
		opts = append(opts, nats.UserCredentials(credsFile[0]), nats.CustomInboxPrefix(rawInbox))
	}
	nc, err := nats.Connect(url, opts...)
	must(err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	must(err)
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BENCH_CALLS", Subjects: []string{"bench.call.>"}, Retention: jetstream.WorkQueuePolicy, Duplicates: 2 * time.Minute})
	must(err)
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BENCH_RESULTS", Subjects: []string{"bench.result.>"}, Duplicates: 2 * time.Minute})
	must(err)
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bench_claims", History: 1})
	must(err)
	cons, err := js.CreateOrUpdateConsumer(ctx, "BENCH_CALLS", jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 5, AckWait: 30 * time.Second})
	must(err)
	result := data1KiB
	serve("raw", cons, func(m jetstream.Msg) {
		id := m.Headers().Get(nats.MsgIdHdr)
		agent, _, _ := strings.Cut(strings.TrimPrefix(m.Subject(), "bench.call."), ".")
		if _, err := kv.Create(ctx, agent+"."+id, []byte(`{"state":"running"}`)); err != nil {
			_ = m.Ack() // a duplicate
			return
		}
		res := nats.NewMsg("bench.result." + agent + "." + id)
		res.Header.Set(nats.MsgIdHdr, id+":result")
		res.Data = result
		if _, err := js.PublishMsg(ctx, res); err != nil {
			return
		}
		_ = m.Ack()
	})
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
