// Command bench measures toolgate end to end against the raw JetStream
// pattern it is built on, in the same run, on an embedded server:
//
//	go run ./test/bench -n 5000 -inflight 1,64 -payload 1024
//
// toolgate: client.Call of a no-op tool → worker (decode, claim, validate,
// policy gate with a real policy, execute, result, audit) → result received.
// baseline: publish to a work-queue stream with a dedup id → pull consumer
// handing to a pool → KV create → result persisted with a dedup id → ack →
// result received. Same payload, same in-flight counts.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
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

	"github.com/toolgate/toolgate/internal/embedded"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

type stats struct {
	calls    int
	elapsed  time.Duration
	lat      []time.Duration
	inflight int
}

func (s stats) rate() float64 { return float64(s.calls) / s.elapsed.Seconds() }

func (s stats) pct(p float64) time.Duration {
	slices.Sort(s.lat)
	return s.lat[min(len(s.lat)-1, int(float64(len(s.lat))*p))]
}

func main() {
	n := flag.Int("n", 5000, "calls per measurement")
	inflightList := flag.String("inflight", "1,64", "comma-separated calls in flight")
	payload := flag.Int("payload", 1024, "argument payload bytes")
	withAuth := flag.Bool("auth", false, "also run toolgate on a server in operator mode, the worker and agent on user JWTs")
	flag.Parse()

	dir, err := os.MkdirTemp("", "toolgate-bench-")
	must(err)
	defer os.RemoveAll(dir)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	must(err)
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		panic("server not ready")
	}
	defer srv.Shutdown()
	var authURL string
	var workerOpts, agentOpts []nats.Option
	if *withAuth {
		in, err := identity.LoadOrCreate(dir + "/keys")
		must(err)
		opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir + "/auth", NoLog: true, NoSigs: true}
		must(embedded.Trust(opts, in))
		asrv, err := server.NewServer(opts)
		must(err)
		go asrv.Start()
		if !asrv.ReadyForConnections(10 * time.Second) {
			panic("server not ready")
		}
		defer asrv.Shutdown()
		authURL = asrv.ClientURL()
		wc, err := in.MintCreds(identity.RoleWorker, "worker")
		must(err)
		ac, err := in.MintCreds(identity.RoleAgent, "bench")
		must(err)
		workerOpts, agentOpts = wc.NATSOptions(), ac.NATSOptions()
	}

	var flights []int
	for _, f := range strings.Split(*inflightList, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		must(err)
		flights = append(flights, v)
	}
	text := strings.Repeat("x", *payload)
	fmt.Printf("payload %d bytes, %d calls per measurement, server %s, GOMAXPROCS from %d CPUs\n\n", *payload, *n, server.VERSION, numCPU())
	fmt.Printf("%-10s %9s %12s %10s %10s\n", "what", "in flight", "calls/s", "p50", "p99")
	for _, f := range flights {
		base := baseline(srv.ClientURL(), *n, f, text)
		tg := toolgate(srv.ClientURL(), *n, f, text, nil, nil)
		rows := []struct {
			name string
			st   stats
		}{{"baseline", base}, {"toolgate", tg}}
		if authURL != "" {
			rows = append(rows, struct {
				name string
				st   stats
			}{"tg+auth", toolgate(authURL, *n, f, text, workerOpts, agentOpts)})
		}
		for _, s := range rows {
			fmt.Printf("%-10s %9d %12.0f %10s %10s\n", s.name, f, s.st.rate(), s.st.pct(0.50).Round(time.Microsecond), s.st.pct(0.99).Round(time.Microsecond))
		}
		fmt.Printf("%-10s %9d %12.2f\n\n", "ratio", f, tg.rate()/base.rate())
	}
}

func numCPU() int { return runtimeNumCPU() }

// drive runs n calls with inflight at a time through call and measures.
func drive(n, inflight int, call func(i int) error) stats {
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for g := 0; g < inflight; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				if err := call(i); err != nil {
					panic(err)
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	return stats{calls: n, elapsed: time.Since(start), lat: lat, inflight: inflight}
}

func baseline(url string, n, inflight int, text string) stats {
	ctx := context.Background()
	nc, err := nats.Connect(url)
	must(err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	must(err)
	suffix := nuid.Next()
	calls, results := "BCALLS"+suffix, "BRESULTS"+suffix
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: calls, Subjects: []string{"bench." + suffix + ".call.>"}, Retention: jetstream.WorkQueuePolicy, Duplicates: 2 * time.Minute})
	must(err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: results, Subjects: []string{"bench." + suffix + ".result.>"}, Duplicates: 2 * time.Minute})
	must(err)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bkv" + suffix, History: 1})
	must(err)
	cons, err := js.CreateOrUpdateConsumer(ctx, calls, jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 5})
	must(err)
	wnc, err := nats.Connect(url)
	must(err)
	defer wnc.Close()
	wjs, _ := jetstream.New(wnc)
	sem := make(chan struct{}, 64)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			id := m.Headers().Get(nats.MsgIdHdr)
			if _, err := kv.Create(ctx, id, []byte(`{"state":"running"}`)); err != nil {
				return // only after the run, when the connection closes
			}
			res := nats.NewMsg("bench." + suffix + ".result." + id)
			res.Header.Set(nats.MsgIdHdr, id+":result")
			res.Data = m.Data()
			if _, err := wjs.PublishMsg(ctx, res); err != nil {
				return
			}
			_ = m.Ack()
		}()
	}, jetstream.PullMaxMessages(64))
	must(err)
	defer func() {
		cc.Stop()
		for i := 0; i < cap(sem); i++ { // wait for the pool to drain
			sem <- struct{}{}
		}
	}()
	data, _ := json.Marshal(map[string]any{"arguments": map[string]any{"text": text}})
	return drive(n, inflight, func(i int) error {
		id := nuid.Next()
		sub, err := nc.SubscribeSync("bench." + suffix + ".result." + id)
		if err != nil {
			return err
		}
		defer sub.Unsubscribe()
		m := nats.NewMsg("bench." + suffix + ".call.agent.noop")
		m.Header.Set(nats.MsgIdHdr, id)
		m.Data = data
		if _, err := js.PublishMsg(ctx, m); err != nil {
			return err
		}
		_, err = sub.NextMsg(30 * time.Second)
		return err
	})
}

func toolgate(url string, n, inflight int, text string, workerOpts, agentOpts []nats.Option) stats {
	reg := tools.NewRegistry()
	reg.MustRegister(&tools.Tool{
		Name: "noop", Description: "returns nothing", Kind: policy.KindOther,
		Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`),
		Handler: tools.HandlerFunc(func(context.Context, *tools.Call) (*tools.Output, error) {
			return &tools.Output{Content: "ok"}, nil
		}),
	})
	wnc, err := nats.Connect(url, workerOpts...)
	must(err)
	defer wnc.Close()
	// The real gate, with a policy that allows the no-op tool.
	pol, _, err := policy.Parse([]byte("tools:\n  default: ask\n  noop: allow\n"), "bench")
	must(err)
	w, err := worker.New(wnc, tools.NewPipeline(reg, tools.WithGate(policy.NewGate(pol))), worker.Config{Concurrency: 64, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	must(err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	nc, err := nats.Connect(url, agentOpts...)
	must(err)
	defer nc.Close()
	for i := 0; ; i++ {
		if _, err := nc.Request("toolgate.api.tools", nil, 100*time.Millisecond); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	c, err := client.New(nc, "bench")
	must(err)
	args := map[string]any{"text": text}
	return drive(n, inflight, func(i int) error {
		res, err := c.Call(context.Background(), "noop", args)
		if err != nil {
			return err
		}
		if res.Status != "ok" {
			return fmt.Errorf("call %d: %+v", i, res)
		}
		return nil
	})
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
