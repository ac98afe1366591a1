// Command clientbench measures the Go client's calls/s against a running
// worker, with a number of calls in flight: the baseline the Python and
// TypeScript clients' benchmarks compare with (the same worker, the same
// tool and arguments).
//
//	go run ./test/clientbench -url nats://127.0.0.1:4222 -creds agent.creds -n 3000 -inflight 64
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

func main() {
	url := flag.String("url", nats.DefaultURL, "NATS URL of the worker")
	creds := flag.String("creds", "", "the agent's .creds file")
	n := flag.Int("n", 3000, "calls")
	inflight := flag.Int("inflight", 64, "calls in flight")
	tool := flag.String("tool", "read", "tool to call")
	args := flag.String("args", `{"path":"hello.txt"}`, "the tool's arguments (JSON)")
	flag.Parse()
	if err := run(*url, *creds, *n, *inflight, *tool, json.RawMessage(*args)); err != nil {
		fmt.Fprintln(os.Stderr, "clientbench:", err)
		os.Exit(1)
	}
}

func run(url, creds string, n, inflight int, tool string, args json.RawMessage) error {
	agent, opts, err := client.Credentials(creds)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	c, err := client.New(nc, agent, client.WithCredsTrust(creds))
	if err != nil {
		return err
	}
	ctx := context.Background()
	if _, err := c.Call(ctx, tool, args); err != nil { // warm up
		return err
	}
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				r, err := c.Call(ctx, tool, args)
				if err != nil || r.Status != events.StatusOK {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	fmt.Printf("go client: %d calls, %d in flight, %.2fs, %.0f calls/s, %d failed, %d refused\n", n, inflight, secs, float64(n)/secs, failed.Load(), c.Refused())
	if failed.Load() > 0 {
		return fmt.Errorf("%d calls failed", failed.Load())
	}
	return nil
}
