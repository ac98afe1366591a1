package test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/toolctl"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// clusterNode is one nats-server process of the test cluster, built from
// the nats-server module in go.mod and configured from
// deploy/nats/cluster-node.conf with the edits its comment asks for.
type clusterNode struct {
	name, conf, bin string
	cmd             *exec.Cmd
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start runs the node and waits until it says it is ready.
func (n *clusterNode) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(n.bin, "-c", n.conf)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", n.name, err)
	}
	n.cmd = cmd
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Server is ready") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s did not become ready", n.name)
	}
}

// kill stops the node with SIGKILL, as a crash would.
func (n *clusterNode) kill() {
	if n.cmd != nil {
		_ = n.cmd.Process.Signal(syscall.SIGKILL)
		_ = n.cmd.Wait()
		n.cmd = nil
	}
}

// TestClusterFromDeployFiles starts a 3-node JetStream cluster of
// nats-server processes (built from the module version in go.mod) from
// the deploy/ files as shipped (auth.conf from toolctl nats-config), two
// workers with --replicas 3 and the approver on their creds, and two
// agents with minted creds; it kills the node leading the calls stream
// with SIGKILL in the middle of the load and starts it again. Every call gets its result,
// no call runs twice, and agent A cannot hear agent B's results.
func TestClusterFromDeployFiles(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	shipped, err := os.ReadFile(filepath.Join("..", "deploy", "nats", "cluster-node.conf"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	cfg := stateTempDir(t)
	if o, e, code := (&process{}).toolctl(t, "nats-config", "--out", cfg); code != 0 {
		t.Fatalf("nats-config: %s %s", o, e)
	}
	auth, _ := os.ReadFile(filepath.Join(cfg, "auth.conf"))
	names := []string{"node-a", "node-b", "node-c"}
	ports, cports := map[string]int{}, map[string]int{}
	for _, n := range names {
		ports[n], cports[n] = freePort(t), freePort(t)
	}
	var nodes []*clusterNode
	var urls []string
	for _, n := range names {
		dir := stateTempDir(t)
		writeFile(t, filepath.Join(dir, "auth.conf"), string(auth))
		conf := filepath.Join(dir, "node.conf")
		writeFile(t, conf, testenv.ClusterNodeConf(string(shipped), n, ports[n], cports[n], filepath.Join(dir, "js"), cports))
		nodes = append(nodes, &clusterNode{name: n, conf: conf, bin: bin})
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[n]))
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.kill()
		}
	})
	url := strings.Join(urls, ",")
	ws, pol := clusterWorkspace(t)
	workerOpts := func(i int, log *slog.Logger) func(o *daemon.Options) {
		return func(o *daemon.Options) {
			o.NATSURL, o.Creds, o.Replicas, o.PolicyFile = url, filepath.Join(cfg, "worker.creds"), 3, pol
			o.Name, o.Logger = fmt.Sprintf("w%d", i), log
		}
	}

	// The first worker starts while only node-a is up: it waits, saying
	// what for, and provisions once the cluster has formed.
	nodes[0].start(t)
	waiting := &signalWriter{match: "waiting for JetStream", ch: make(chan struct{})}
	w0 := make(chan *process, 1)
	go func() { w0 <- startProcess(t, ws, workerOpts(0, slog.New(slog.NewTextHandler(waiting, nil)))) }()
	select {
	case <-waiting.ch:
	case p := <-w0:
		t.Fatalf("a worker provisioned replicas 3 on one node:\n%s", p.out)
	case <-time.After(2 * time.Minute):
		t.Fatal("the worker never said what it waits for")
	}
	var wg sync.WaitGroup
	for _, n := range nodes[1:] {
		wg.Add(1)
		go func() { defer wg.Done(); n.start(t) }()
	}
	wg.Wait()
	select {
	case <-w0:
	case <-time.After(3 * time.Minute):
		t.Fatal("the first worker did not start once the cluster formed")
	}
	startProcess(t, ws, workerOpts(1, slog.New(slog.NewTextHandler(io.Discard, nil))))
	actx, acancel := context.WithCancel(context.Background())
	adone := make(chan error, 1)
	go func() {
		adone <- approver.Serve(actx, approver.Options{NATSURL: url, Creds: filepath.Join(cfg, "approver.creds"),
			Listen: "127.0.0.1:0", DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Out: io.Discard})
	}()
	defer func() {
		acancel()
		if err := testenv.Recv(t, adone, "adone"); err != nil {
			t.Errorf("approver: %v", err)
		}
	}()

	agents := map[string]*client.Client{}
	credsOf := map[string]string{}
	var conns = map[string]*nats.Conn{}
	for _, a := range []string{"agent-a", "agent-b"} {
		f := filepath.Join(t.TempDir(), a+".creds")
		if _, e, code := (&process{}).toolctl(t, "creds", "agent", a, "--out", f); code != toolctl.ExitOK {
			t.Fatal(e)
		}
		credsOf[a] = f
		name, opts, err := client.Credentials(f)
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(url, append(opts, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		conns[a] = nc
		agents[a], _ = client.New(nc, name)
	}
	for _, subj := range []string{"toolgate.result.agent-b.>", "_INBOX_agent-b.>", "_INBOX.>"} {
		spy, _, err := identity.Dial(url, credsOf["agent-a"], identity.RoleAgent, "agent-a")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := spy.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
		_ = spy.Flush()
		if err := spy.LastError(); !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("agent-a subscribing to %s: %v", subj, err)
		}
		spy.Close()
	}

	const perAgent = 25
	type outcome struct {
		id  string
		res *events.ResultData
		err error
	}
	outcomes := make(chan outcome, 2*perAgent)
	started := make(chan struct{}, 2*perAgent)
	for a, c := range agents {
		for i := range perAgent {
			go func() {
				id := fmt.Sprintf("%s-%d", a, i)
				started <- struct{}{}
				ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
				defer cancel()
				r, err := c.Call(ctx, "bash", map[string]any{"command": "echo " + id + " >> runs.log"}, client.WithID(id))
				outcomes <- outcome{id, r, err}
			}()
		}
	}
	// Mid-load: once a third of the calls finished, kill the calls
	// stream's leader and start it again.
	var got []outcome
	for len(got) < 2*perAgent/3 {
		got = append(got, testenv.Recv(t, outcomes, "outcomes"))
	}
	admin, _, err := identity.Dial(url, filepath.Join(cfg, "admin.creds"), identity.RoleAdmin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ajs, _ := jetstream.New(admin)
	ictx, icancel := context.WithTimeout(context.Background(), 30*time.Second)
	st, err := ajs.Stream(ictx, bus.StreamCalls)
	icancel()
	if err != nil {
		t.Fatal(err)
	}
	var leader *clusterNode
	for _, n := range nodes {
		if st.CachedInfo().Cluster != nil && n.name == st.CachedInfo().Cluster.Leader {
			leader = n
		}
	}
	if leader == nil {
		t.Fatalf("no leader of the calls stream in %+v", st.CachedInfo().Cluster)
	}
	leader.kill()
	for len(got) < 2*perAgent-perAgent/2 {
		got = append(got, testenv.Recv(t, outcomes, "outcomes"))
	}
	leader.start(t)
	for len(got) < 2*perAgent {
		got = append(got, testenv.Recv(t, outcomes, "outcomes"))
	}
	for _, o := range got {
		if o.err != nil || o.res.Status != events.StatusOK {
			t.Errorf("call %s: %+v %v", o.id, o.res, o.err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(ws, "runs.log"))
	runs := map[string]int{}
	for _, l := range strings.Fields(string(b)) {
		runs[l]++
	}
	for _, o := range got {
		if runs[o.id] != 1 {
			t.Errorf("call %s ran %d times", o.id, runs[o.id])
		}
	}
	if len(runs) != 2*perAgent {
		t.Errorf("%d distinct calls ran, want %d", len(runs), 2*perAgent)
	}
	t.Logf("killed and restarted %s, the calls stream's leader, after %d of %d calls", leader.name, 2*perAgent/3, 2*perAgent)
}

// signalWriter closes ch the first time a write contains match.
type signalWriter struct {
	match string
	ch    chan struct{}
	once  sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.match) {
		w.once.Do(func() { close(w.ch) })
	}
	return len(p), nil
}

// clusterWorkspace makes the workspace a cluster's workers share, owned
// by an ordinary user when the tests run as root (bash runs as the
// workspace's owner, never root), and a policy file allowing every tool.
func clusterWorkspace(t *testing.T) (ws, policy string) {
	t.Helper()
	ws = newWorkspace(t)
	if os.Getuid() == 0 {
		if err := os.Chown(ws, 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	policy = filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policy, "tools:\n  default: allow\n")
	return ws, policy
}
