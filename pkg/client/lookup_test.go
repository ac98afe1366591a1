package client_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/embedded"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/trust"
)

// TestCallOutlivesAnUnansweredLookup: a waiting call looks for its stored
// result now and then; when a worker takes such a look-up and never
// answers it (it stopped), the call still returns its result when it
// comes, not at the call's own deadline.
func TestCallOutlivesAnUnansweredLookup(t *testing.T) {
	dir, in, srv := installServer(t)
	release := make(chan struct{})
	runWorker(t, srv, in, holdRegistry(nil, release))

	// More members of the workers' queue group for look-ups that take
	// requests and never answer: workers that stopped. Seven of them
	// beside the live worker, so that one of the call's few look-ups
	// (they back off) reaches one all but surely.
	hcreds, err := in.MintCreds(identity.RoleWorker, "stopped")
	if err != nil {
		t.Fatal(err)
	}
	hnc, err := nats.Connect(srv.ClientURL(), hcreds.NATSOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer hnc.Close()
	swallowed := make(chan struct{})
	var once sync.Once
	for range 7 {
		if _, err := hnc.QueueSubscribe(events.SubjectResultAPI, "workers", func(*nats.Msg) {
			once.Do(func() { close(swallowed) })
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := hnc.Flush(); err != nil {
		t.Fatal(err)
	}

	c := agentClient(t, srv, in, dir, "agent-7")
	// A deadline far beyond the test's patience: without its own bound,
	// the swallowed look-up would hold the call until then.
	done := callAsync(c, "hold", time.Hour)
	testenv.Recv(t, swallowed, "a look-up reaching the stopped worker")
	close(release)
	o := testenv.Recv(t, done, "the call's result")
	if o.err != nil || o.res.Status != events.StatusOK || o.res.Output != "released" {
		t.Fatalf("call: %+v, %v", o.res, o.err)
	}
}

// holdRegistry registers the tool hold, which sends on started (when not
// nil; buffered for every call) as it starts and returns "released" once
// release is closed.
func holdRegistry(started, release chan struct{}) *tools.Registry {
	reg := tools.NewRegistry()
	reg.MustRegister(&tools.Tool{
		Name: "hold", Description: "Returns when released.", Kind: policy.KindOther,
		Parameters: json.RawMessage(`{"type":"object"}`),
		Handler: tools.HandlerFunc(func(ctx context.Context, _ *tools.Call) (*tools.Output, error) {
			if started != nil {
				started <- struct{}{}
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return &tools.Output{Content: "released"}, nil
		}),
	})
	return reg
}

// installServer makes an install in a temporary directory and starts its
// embedded server, closed when the test ends (after the workers the test
// starts later stop: cleanups run last first).
func installServer(t *testing.T) (dir string, in *identity.Install, srv *embedded.Server) {
	t.Helper()
	dir = t.TempDir()
	in, err := identity.LoadOrCreate(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err = embedded.Start(embedded.Config{Listen: "127.0.0.1:0", DataDir: dir, Install: in})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return dir, in, srv
}

// outcome is what a call returned.
type outcome struct {
	res *events.ResultData
	err error
}

// callAsync calls tool with no arguments, bounded by within, and sends
// what it returned on the channel.
func callAsync(c *client.Client, tool string, within time.Duration) <-chan outcome {
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		r, err := c.Call(ctx, tool, map[string]any{})
		done <- outcome{r, err}
	}()
	return done
}

// runWorker runs a worker of reg on srv until the test ends, and
// returns once it takes calls.
func runWorker(t *testing.T, srv *embedded.Server, in *identity.Install, reg *tools.Registry) {
	t.Helper()
	wcreds, err := in.MintCreds(identity.RoleWorker, "worker")
	if err != nil {
		t.Fatal(err)
	}
	wnc, err := nats.Connect(srv.ClientURL(), wcreds.NATSOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wnc.Close)
	w, err := worker.New(wnc, tools.NewPipeline(reg), worker.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Signer: trust.Signer{Key: wcreds.Key, JWT: wcreds.JWT}})
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	w.OnReady(func() { close(ready) })
	wctx, wcancel := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	t.Cleanup(func() { wcancel(); testenv.Recv(t, wdone, "the worker's end") })
	testenv.Recv(t, ready, "the worker taking calls")
}

// agentClient connects agent to srv with credentials the install mints
// (written under dir) and returns its client.
func agentClient(t *testing.T, srv *embedded.Server, in *identity.Install, dir, agent string) *client.Client {
	t.Helper()
	c, _ := agentConn(t, srv, in, dir, agent)
	return c
}

// agentConn is agentClient with the connection's extra options, and the
// connection.
func agentConn(t *testing.T, srv *embedded.Server, in *identity.Install, dir, agent string, extra ...nats.Option) (*client.Client, *nats.Conn) {
	t.Helper()
	jwt, err := in.Mint(identity.RoleAgent, agent)
	if err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(dir, agent+".creds")
	if err := identity.WriteFile(creds, jwt, 0o600); err != nil {
		t.Fatal(err)
	}
	name, opts, err := client.Credentials(creds)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL(), append(opts, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc, name, client.WithCredsTrust(creds))
	if err != nil {
		t.Fatal(err)
	}
	return c, nc
}

// TestCallWaitsForAWorker: the workers' intake stores an agent's calls;
// a call made while no worker runs (all of them restarting) is published
// again under its id until one does, and then runs once.
func TestCallWaitsForAWorker(t *testing.T) {
	dir, in, srv := installServer(t)
	var n int
	var mu sync.Mutex
	reg := tools.NewRegistry()
	reg.MustRegister(&tools.Tool{
		Name: "count", Description: "Counts its runs.", Kind: policy.KindOther,
		Parameters: json.RawMessage(`{"type":"object"}`),
		Handler: tools.HandlerFunc(func(context.Context, *tools.Call) (*tools.Output, error) {
			mu.Lock()
			defer mu.Unlock()
			n++
			return &tools.Output{Content: "ran"}, nil
		}),
	})
	c := agentClient(t, srv, in, dir, "agent-8")
	done := callAsync(c, "count", time.Minute)
	// Longer than the publish's default retries (2 × 250 ms): without its
	// own, the call has failed by now.
	time.Sleep(1500 * time.Millisecond)
	select {
	case o := <-done:
		t.Fatalf("the call ended before any worker ran: %+v, %v", o.res, o.err)
	default:
	}
	runWorker(t, srv, in, reg)
	o := testenv.Recv(t, done, "the call's result")
	if o.err != nil || o.res.Status != events.StatusOK || o.res.Output != "ran" {
		t.Fatalf("call: %+v, %v", o.res, o.err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n != 1 {
		t.Fatalf("the tool ran %d times, want 1", n)
	}
}
