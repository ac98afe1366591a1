package resultcache_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/resultcache"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/builtin"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// runs counts the executions of each tool (its handler called).
type runs struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *runs) get(tool string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[tool]
}

// node is what a worker process holds: the built-in tools (each
// execution counted) and a result cache over the fleet's bucket.
type node struct {
	reg   *tools.Registry
	cache *resultcache.Cache
	runs  *runs
}

func newNode(t *testing.T, js jetstream.JetStream, ws string) *node {
	t.Helper()
	n := &node{reg: tools.NewRegistry(), runs: &runs{n: map[string]int{}}}
	n.reg.SetOverride(func(tl *tools.Tool) *tools.Tool {
		cp := *tl
		h := tl.Handler
		cp.Handler = tools.HandlerFunc(func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
			n.runs.mu.Lock()
			n.runs.n[cp.Name]++
			n.runs.mu.Unlock()
			return h.Handle(ctx, c)
		})
		return &cp
	})
	if err := builtin.Register(n.reg, builtin.Config{Workspace: ws}); err != nil {
		t.Fatal(err)
	}
	c, err := resultcache.New(context.Background(), js, resultcache.Config{Enabled: true}, quiet, ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	n.cache = c
	return n
}

// run starts a real worker for n on srv; the returned function stops it.
func (n *node) run(t *testing.T, srv *testenv.Server, name string) func() {
	t.Helper()
	nc, _ := srv.Connect(t)
	w, err := worker.New(nc, tools.NewPipeline(n.reg, tools.Use(n.cache.Middleware)), func() worker.Config {
		cfg := worker.Config{Name: name, Logger: quiet}
		cfg.Signer, cfg.Verifier, _ = testenv.WorkerSigning(t)
		return cfg
	}())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	w.OnReady(func() { close(ready) })
	go func() { done <- w.Run(ctx) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("worker %s: %v", name, err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); testenv.Recv(t, done, "done") }) }
	t.Cleanup(stop)
	return stop
}

type fleet struct {
	srv *testenv.Server
	js  jetstream.JetStream
	ws  string
	c   *client.Client
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	srv := testenv.StartNATS(t, "")
	_, js := srv.Connect(t)
	if err := bus.Provision(context.Background(), js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	write(t, filepath.Join(ws, "notes.txt"), "alpha\nbeta\n")
	nc, _ := srv.Connect(t)
	// The workers' account (the test install's, which run signs with).
	_, _, account := testenv.WorkerSigning(t)
	c, err := client.New(nc, "agent", client.WithTrustedAccounts(account))
	if err != nil {
		t.Fatal(err)
	}
	return &fleet{srv: srv, js: js, ws: ws, c: c}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fleet) call(t *testing.T, tool string, args map[string]any) *events.ResultData {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := f.c.Call(ctx, tool, args)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != events.StatusOK {
		t.Fatalf("%s: %s %s", tool, r.Status, r.Output)
	}
	return r
}

// The second identical read is served from the cache: the tool does not
// run again, and the result and its audit event say cached.
func TestCacheHitSkipsTheTool(t *testing.T) {
	f := newFleet(t)
	n := newNode(t, f.js, f.ws)
	n.run(t, f.srv, "w1")
	first := f.call(t, "read", map[string]any{"path": "notes.txt"})
	second := f.call(t, "read", map[string]any{"path": "notes.txt"})
	if first.Cached || !second.Cached {
		t.Fatalf("cached: first %v, second %v", first.Cached, second.Cached)
	}
	if second.Output != first.Output || !strings.Contains(second.Output, "beta") {
		t.Errorf("cached output %q, first %q", second.Output, first.Output)
	}
	if got := n.runs.get("read"); got != 1 {
		t.Errorf("read ran %d times, want 1", got)
	}
	if s := n.cache.Stats(); s.Hits != 1 || s.Stored != 1 {
		t.Errorf("stats %+v", s)
	}
	// Other arguments are another entry.
	third := f.call(t, "read", map[string]any{"path": "notes.txt", "limit": 1})
	if third.Cached || n.runs.get("read") != 2 {
		t.Errorf("a read with other arguments: cached %v, runs %d", third.Cached, n.runs.get("read"))
	}
	// The audit event of the cached call says so.
	st, err := f.js.Stream(context.Background(), bus.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.OrderedConsumer(context.Background(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.AuditSubject("agent", "read")}})
	if err != nil {
		t.Fatal(err)
	}
	for found := false; !found; {
		m, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
		if err != nil {
			t.Fatalf("no execution audit event of the cached call: %v", err)
		}
		var a events.AuditData
		if _, err := events.DecodeData(m.Headers(), m.Data(), &a); err == nil && a.CallID == second.CallID && a.Kind == events.AuditExecution {
			found = true
			if !a.Cached {
				t.Errorf("audit of the cached call: %+v", a)
			}
		}
	}
}

// An edit through another worker starts a new workspace generation that
// every worker sees: the next read runs again and returns the new text.
func TestEditThroughAnotherWorkerInvalidates(t *testing.T) {
	f := newFleet(t)
	a, b := newNode(t, f.js, f.ws), newNode(t, f.js, f.ws)
	stopA := a.run(t, f.srv, "a")
	f.call(t, "read", map[string]any{"path": "notes.txt"})
	if r := f.call(t, "read", map[string]any{"path": "notes.txt"}); !r.Cached {
		t.Fatal("second read not cached")
	}
	kv, err := f.js.KeyValue(context.Background(), bus.BucketCache)
	if err != nil {
		t.Fatal(err)
	}
	gens := func() int {
		n := 0
		lister, err := kv.ListKeys(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for k := range lister.Keys() {
			if strings.HasPrefix(k, "gen.") {
				n++
			}
		}
		return n
	}
	if gens() != 0 {
		t.Fatal("a generation before any write")
	}
	// Only worker b runs while the edit is made.
	stopA()
	stopB := b.run(t, f.srv, "b")
	f.call(t, "edit", map[string]any{"path": "notes.txt", "old_string": "beta", "new_string": "gamma"})
	if b.runs.get("edit") != 1 || gens() != 1 {
		t.Fatalf("edit on b: runs %d, generations %d", b.runs.get("edit"), gens())
	}
	stopB()
	a.run(t, f.srv, "a2")
	r := f.call(t, "read", map[string]any{"path": "notes.txt"})
	if r.Cached || !strings.Contains(r.Output, "gamma") || strings.Contains(r.Output, "beta") {
		t.Fatalf("read after the edit: cached %v output %q", r.Cached, r.Output)
	}
	if a.runs.get("read") != 2 {
		t.Errorf("a ran read %d times, want 2", a.runs.get("read"))
	}
}

// A change made outside toolgate, keeping the file's size and mtime, is
// caught when the entry is re-validated: the read runs again. A file
// added outside is found by the next grep.
func TestOutsideChangeDetected(t *testing.T) {
	f := newFleet(t)
	n := newNode(t, f.js, f.ws)
	n.run(t, f.srv, "w1")
	path := filepath.Join(f.ws, "notes.txt")
	f.call(t, "read", map[string]any{"path": "notes.txt"})
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	write(t, path, "alpha\nBETA\n") // same size
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	r := f.call(t, "read", map[string]any{"path": "notes.txt"})
	if r.Cached || !strings.Contains(r.Output, "BETA") {
		t.Fatalf("read after an outside change: cached %v output %q", r.Cached, r.Output)
	}
	if n.runs.get("read") != 2 {
		t.Errorf("read ran %d times, want 2", n.runs.get("read"))
	}

	grep := map[string]any{"pattern": "needle", "output_mode": "files_with_matches"}
	write(t, filepath.Join(f.ws, "a.txt"), "a needle\n")
	f.call(t, "grep", grep)
	if r := f.call(t, "grep", grep); !r.Cached {
		t.Fatal("second grep not cached")
	}
	if err := os.MkdirAll(filepath.Join(f.ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(f.ws, "sub", "b.txt"), "another needle\n")
	r = f.call(t, "grep", grep)
	if r.Cached || !strings.Contains(r.Output, "b.txt") {
		t.Fatalf("grep after a file was added outside: cached %v output %q", r.Cached, r.Output)
	}
	if n.runs.get("grep") != 2 {
		t.Errorf("grep ran %d times, want 2", n.runs.get("grep"))
	}
}
