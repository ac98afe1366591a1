package test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/toolctl"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// testCluster is a running 3-node cluster of nats-server processes
// configured from the deploy/ files, with the credentials toolctl
// nats-config minted for it.
type testCluster struct {
	nodes []*clusterNode
	url   string // every node's client URL, comma-separated
	urls  []string
	cfg   string // the directory of auth.conf and the role creds
}

// startTestCluster builds nats-server from the module version in go.mod
// and starts three nodes of one cluster.
func startTestCluster(t *testing.T) *testCluster {
	t.Helper()
	shipped, err := os.ReadFile(filepath.Join("..", "deploy", "nats", "cluster-node.conf"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	c := &testCluster{cfg: stateTempDir(t)}
	if o, e, code := (&process{}).toolctl(t, "nats-config", "--out", c.cfg); code != 0 {
		t.Fatalf("nats-config: %s %s", o, e)
	}
	auth, _ := os.ReadFile(filepath.Join(c.cfg, "auth.conf"))
	names := []string{"node-a", "node-b", "node-c"}
	ports, cports := map[string]int{}, map[string]int{}
	for _, n := range names {
		ports[n], cports[n] = freePort(t), freePort(t)
	}
	var urls []string
	for _, n := range names {
		dir := stateTempDir(t)
		writeFile(t, filepath.Join(dir, "auth.conf"), string(auth))
		conf := filepath.Join(dir, "node.conf")
		writeFile(t, conf, testenv.ClusterNodeConf(string(shipped), n, ports[n], cports[n], filepath.Join(dir, "js"), cports))
		c.nodes = append(c.nodes, &clusterNode{name: n, conf: conf, bin: bin})
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[n]))
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.kill()
		}
	})
	c.url, c.urls = strings.Join(urls, ","), urls
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.start(t) }()
	}
	wg.Wait()
	return c
}

// leaderOf is the node leading stream.
func (c *testCluster) leaderOf(t *testing.T, js jetstream.JetStream, stream string) *clusterNode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if info := st.CachedInfo(); info.Cluster != nil {
		for _, n := range c.nodes {
			if n.name == info.Cluster.Leader {
				return n
			}
		}
	}
	t.Fatalf("no leader of %s in %+v", stream, st.CachedInfo().Cluster)
	return nil
}

// consumerLeader is the node leading the workers consumer.
func (c *testCluster) consumerLeader(t *testing.T, js jetstream.JetStream) *clusterNode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, bus.StreamCalls, bus.ConsumerWorkers)
	if err != nil {
		t.Fatal(err)
	}
	if info := cons.CachedInfo(); info.Cluster != nil {
		for _, n := range c.nodes {
			if n.name == info.Cluster.Leader {
				return n
			}
		}
	}
	t.Fatalf("no leader of the workers consumer in %+v", cons.CachedInfo().Cluster)
	return nil
}

// lead makes node the leader of a stream or consumer: while leader
// names another node, it asks that leader to step down in node's favour
// (api is the stepdown subject).
func (c *testCluster) lead(t *testing.T, nc *nats.Conn, api string, leader func() *clusterNode, node *clusterNode) {
	t.Helper()
	for end := time.Now().Add(time.Minute); leader() != node; time.Sleep(500 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: %s does not lead", api, node.name)
		}
		if _, err := nc.Request(api, []byte(`{"placement":{"preferred":"`+node.name+`"}}`), 10*time.Second); err != nil {
			t.Logf("%s: %v", api, err)
		}
	}
}

// toolctl runs toolctl on the cluster with the admin's credentials.
func (c *testCluster) toolctl(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code = toolctl.Run(ctx, append([]string{"--nats", c.url, "--creds", filepath.Join(c.cfg, "admin.creds")}, args...), &o, &e)
	return o.String(), e.String(), code
}

// fleetCall is one call of the fleet and how it ended.
type fleetCall struct {
	id      string
	res     *events.ResultData
	err     error
	latency time.Duration // from its publish to its result
}

// TestFleetAuditLeaderKilled is the fleet scenario in small: a 3-node
// cluster, three workers, agents that never pause. While calls are being
// finished the node leading the audit stream is killed with SIGKILL, and
// during the election that follows one worker is stopped (as SIGTERM
// stops it). The workers connect to the two other nodes and the workers
// consumer is led by one of them: a call in flight from the server to a
// worker when that server dies is lost with it, and JetStream delivers
// it again only after the ack wait (docs/ARCHITECTURE.md, "Calls a dying
// server strands"), which no worker can shorten. Every call that got a
// final result has exactly one execution event, `toolctl audit --verify`
// agrees, and no call waited a whole ack wait in the queue: it counts the
// calls whose result came an ack wait or more after their publish (each
// of these echo calls takes milliseconds to run; only a call left in the
// queue until its ack wait expired takes that long).
func TestFleetAuditLeaderKilled(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	c := startTestCluster(t)
	ws, pol := clusterWorkspace(t)
	var workers []*process
	var logs [3]*syncBuffer
	for i := range 3 {
		logs[i] = &syncBuffer{}
		workers = append(workers, startProcess(t, ws, func(o *daemon.Options) {
			o.NATSURL, o.Creds, o.Replicas, o.PolicyFile = strings.Join(c.urls[1:], ","), filepath.Join(c.cfg, "worker.creds"), 3, pol
			o.Name, o.Logger = fmt.Sprintf("w%d", i), slog.New(slog.NewTextHandler(logs[i], &slog.HandlerOptions{Level: slog.LevelDebug}))
			o.ShutdownGrace = 15 * time.Second
		}))
	}

	const agents, loops = 6, 2 // two calls in flight per agent, always
	var stopLoad atomic.Bool
	finished := make(chan fleetCall, 1024)
	var load sync.WaitGroup
	for a := range agents {
		name := fmt.Sprintf("agent-%d", a)
		f := filepath.Join(t.TempDir(), name+".creds")
		if _, e, code := (&process{}).toolctl(t, "creds", "agent", name, "--out", f); code != toolctl.ExitOK {
			t.Fatal(e)
		}
		cname, opts, err := client.Credentials(f)
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(c.url, append(opts, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		cl, _ := client.New(nc, cname)
		for l := range loops {
			load.Add(1)
			go func() {
				defer load.Done()
				for i := 0; !stopLoad.Load(); i++ {
					id := fmt.Sprintf("%s-%d-%d", name, l, i)
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
					start := time.Now()
					r, err := cl.Call(ctx, "bash", map[string]any{"command": "echo " + id}, client.WithID(id))
					cancel()
					finished <- fleetCall{id: id, res: r, err: err, latency: time.Since(start)}
				}
			}()
		}
	}
	var got []fleetCall
	collect := func(n int) {
		for range n {
			got = append(got, testenv.Recv(t, finished, "a call's result"))
		}
	}
	go func() { load.Wait(); close(finished) }()

	admin, _, err := identity.Dial(c.url, filepath.Join(c.cfg, "admin.creds"), identity.RoleAdmin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ajs, _ := jetstream.New(admin)

	// Steady load, then the audit stream's leader dies while calls are
	// being finished, and a worker is stopped during the election.
	doomed := c.nodes[0]
	c.lead(t, admin, "$JS.API.STREAM.LEADER.STEPDOWN."+bus.StreamAudit, func() *clusterNode { return c.leaderOf(t, ajs, bus.StreamAudit) }, doomed)
	if c.consumerLeader(t, ajs) == doomed {
		c.lead(t, admin, "$JS.API.CONSUMER.LEADER.STEPDOWN."+bus.StreamCalls+"."+bus.ConsumerWorkers, func() *clusterNode { return c.consumerLeader(t, ajs) }, c.nodes[1])
	}
	collect(40)
	leader := c.leaderOf(t, ajs, bus.StreamAudit)
	t.Logf("killing %s at %s; the calls stream led by %s, its consumer by %s", leader.name, time.Now().Format("15:04:05.000"),
		c.leaderOf(t, ajs, bus.StreamCalls).name, c.consumerLeader(t, ajs).name)
	leader.kill()
	stopped := make(chan error, 1)
	go func() { stopped <- workers[1].stop() }()
	collect(60)
	if err := testenv.Recv(t, stopped, "the stopped worker"); err != nil {
		t.Errorf("stopping a worker during the election: %v", err)
	}
	leader.start(t)
	collect(20)
	stopLoad.Store(true)
	for fc := range finished {
		got = append(got, fc)
	}
	waitAcked(t, ajs)

	ackWait := 30 * time.Second // bus.Config's default, which the workers use
	stranded := 0
	for _, fc := range got {
		if fc.err != nil || fc.res.Status != events.StatusOK {
			t.Errorf("call %s: %+v %v", fc.id, fc.res, fc.err)
		}
		if fc.latency >= ackWait {
			stranded++
			t.Errorf("call %s waited %s for its result: an ack wait in the queue", fc.id, fc.latency.Round(time.Millisecond))
			for i, l := range logs {
				for _, line := range strings.Split(l.String(), "\n") {
					if strings.Contains(line, fc.id) {
						t.Logf("w%d: %s", i, line)
					}
				}
			}
		}
	}
	if stranded > 0 {
		for _, line := range strings.Split(logs[1].String(), "\n") {
			if strings.Contains(line, "stopping") || strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
				t.Logf("w1: %s", line)
			}
		}
	}
	execs := map[string]int{}
	for _, m := range auditMsgs(t, ajs) {
		if m.kind == events.AuditExecution {
			execs[m.callID]++
		}
	}
	for _, fc := range got {
		if fc.err == nil && execs[fc.id] != 1 {
			t.Errorf("call %s has %d execution events, want 1", fc.id, execs[fc.id])
		}
	}
	out, errOut, code := c.toolctl(t, "audit", "--verify", "--live-within", "10m")
	if code != 0 {
		t.Errorf("audit --verify = %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("%d calls; killed %s (the audit stream's leader) after 40 and stopped w1 during the election; %d waited an ack wait",
		len(got), leader.name, stranded)
}
