package worker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// counter counts executions per call id across workers.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) inc(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[id]++
}

func (c *counter) get(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

func (c *counter) total() (calls, runs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.n {
		calls++
		runs += n
	}
	return
}

// testRegistry returns real tools for the worker tests: echo, sleep, peek
// (pure) and fail; each records its executions in ctr.
func testRegistry(t testing.TB, ctr *counter, started chan<- string) *tools.Registry {
	t.Helper()
	reg := tools.NewRegistry()
	reg.MustRegister(&tools.Tool{
		Name: "echo", Description: "returns its text", Kind: policy.KindOther,
		Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`),
		Handler: tools.HandlerFunc(func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
			ctr.inc(c.ID)
			return &tools.Output{Content: c.Args["text"].(string)}, nil
		}),
	})
	reg.MustRegister(&tools.Tool{
		Name: "sleep", Description: "sleeps ms milliseconds", Kind: policy.KindOther, MaxTimeout: time.Minute,
		Parameters: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer","minimum":0}},"required":["ms"]}`),
		Handler: tools.HandlerFunc(func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
			ctr.inc(c.ID)
			if started != nil {
				started <- c.ID
			}
			ms, _ := c.Args["ms"].(json.Number).Int64()
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return &tools.Output{Content: "slept"}, nil
			case <-ctx.Done():
				return &tools.Output{Content: "partial"}, ctx.Err()
			}
		}),
	})
	reg.MustRegister(&tools.Tool{
		// peek is pure, as the built-in read is: its calls run unclaimed.
		Name: "peek", Description: "returns its text, changing nothing", Kind: policy.KindRead, Pure: true,
		Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`),
		Handler: tools.HandlerFunc(func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
			ctr.inc(c.ID)
			return &tools.Output{Content: c.Args["text"].(string)}, nil
		}),
	})
	reg.MustRegister(&tools.Tool{
		Name: "fail", Description: "always fails", Kind: policy.KindOther,
		Handler: tools.HandlerFunc(func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
			ctr.inc(c.ID)
			return &tools.Output{Content: "no such thing", IsError: true}, nil
		}),
	})
	return reg
}

// signing gives cfg the tests' worker key and verifier unless it has a
// signer, as the daemon gives a worker its credentials'.
func signing(t testing.TB, cfg Config) Config {
	if cfg.Signer.Key == nil {
		cfg.Signer, cfg.Verifier, _ = testenv.WorkerSigning(t)
	}
	return cfg
}

type running struct {
	w    *Worker
	stop func() error
}

// startWorker runs a worker against url until the test ends or stop.
func startWorker(t testing.TB, url string, reg *tools.Registry, cfg Config, opts ...tools.PipelineOption) *running {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w, err := New(nc, tools.NewPipeline(reg, opts...), signing(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(2 * time.Minute):
				runErr = errors.New("worker did not stop")
			}
			nc.Close()
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	waitReady(t, nc)
	return &running{w: w, stop: stop}
}

// waitReady waits until the worker answers the tools listing, i.e. it has
// provisioned the bus and is consuming.
func waitReady(t testing.TB, nc *nats.Conn) {
	t.Helper()
	for i := 0; i < 400; i++ {
		if _, err := nc.Request(events.SubjectToolsList, nil, 50*time.Millisecond); err == nil {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatal("worker never became ready")
}

func newClient(t testing.TB, s *testenv.Server, agent string, opts ...client.Option) (*client.Client, *nats.Conn) {
	t.Helper()
	nc, _ := s.Connect(t)
	c, err := client.New(nc, agent, append([]client.Option{trusting(t)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c, nc
}

// trusting is the client option that trusts the tests' workers.
func trusting(t testing.TB) client.Option {
	_, _, account := testenv.WorkerSigning(t)
	return client.WithTrustedAccounts(account)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var fastBus = bus.Config{AckWait: 2 * time.Second, MaxDeliver: 5}
