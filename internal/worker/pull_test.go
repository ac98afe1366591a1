package worker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools"
)

// TestWorkerHoldsNoMoreCallsThanItsSlots proves that no call waits in the
// worker's client buffer: with every slot busy, the calls delivered and not
// acked are exactly the running ones, and the rest stay in the stream
// where another worker can take them.
func TestWorkerHoldsNoMoreCallsThanItsSlots(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	started := make(chan string, 64)
	reg := testRegistry(t, &ctr, started)
	const slots, calls = 4, 20
	// One agent, no fair share: the puller's own accounting (held calls,
	// the fair share's, are kept alive and bounded: fair_test.go).
	startWorker(t, s.ClientURL(), reg, Config{Name: "w1", Concurrency: slots, AgentConcurrency: -1, ShutdownGrace: time.Millisecond, Bus: fastBus})
	c, nc := newClient(t, s, "hold")
	for i := range calls {
		if _, err := c.Submit(ctxT(t), "sleep", map[string]any{"ms": 600000}, client.WithID(fmt.Sprintf("hold-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for range slots {
		select {
		case <-started:
		case <-ctxT(t).Done():
			t.Fatal("the slots did not fill")
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctxT(t), bus.StreamCalls, bus.ConsumerWorkers)
	if err != nil {
		t.Fatal(err)
	}
	// Every call is stored first (the last publishes may still be on
	// their way when the slots fill).
	stored := ctxT(t)
	for {
		info, err := cons.Info(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if info.NumPending+uint64(info.NumAckPending) == calls {
			break
		}
		select {
		case <-stored.Done():
			t.Fatalf("only %d of %d calls stored", info.NumPending+uint64(info.NumAckPending), calls)
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Several ack waits (2s) pass while the calls run: the heartbeat keeps
	// the running ones, and nothing else is delivered.
	for range 3 {
		info, err := cons.Info(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending != slots || info.NumPending != calls-slots || info.NumWaiting != 0 || info.NumRedelivered != 0 {
			t.Fatalf("delivered unacked %d, pending %d, pull requests waiting %d, redelivered %d; want %d, %d, 0, 0",
				info.NumAckPending, info.NumPending, info.NumWaiting, info.NumRedelivered, slots, calls-slots)
		}
		select {
		case id := <-started:
			t.Fatalf("call %s started with every slot busy", id)
		case <-time.After(3 * time.Second):
		}
	}
	if _, runs := ctr.total(); runs != slots {
		t.Fatalf("%d executions, want %d", runs, slots)
	}
}

// TestSameCallDeliveredTwiceAtOnceRunsOnce: two copies of each call in
// the stream at once (published with different dedup ids), taken by two
// workers concurrently, run once each; the claim decides, and every copy
// ends acked.
func TestSameCallDeliveredTwiceAtOnceRunsOnce(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	reg := testRegistry(t, &ctr, nil)
	startWorker(t, s.ClientURL(), reg, Config{Name: "w1", Concurrency: 8, Bus: fastBus})
	startWorker(t, s.ClientURL(), reg, Config{Name: "w2", Concurrency: 8, Bus: fastBus})
	nc, js := s.Connect(t)
	results, err := nc.SubscribeSync(events.ResultsOf("twice"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		id := fmt.Sprintf("twice-%d", i)
		ev, err := events.NewCall(id, "twice", events.CallData{Arguments: []byte(`{"text":"x"}`)})
		if err != nil {
			t.Fatal(err)
		}
		for copy := range 2 {
			m, err := events.Encode(events.CallSubject("twice", "echo"), ev, events.Binary)
			if err != nil {
				t.Fatal(err)
			}
			m.Header.Set(events.HeaderMsgID, fmt.Sprintf("%s-copy%d", id, copy))
			if _, err := js.PublishMsg(ctxT(t), m); err != nil {
				t.Fatal(err)
			}
		}
	}
	final := map[string]bool{}
	for len(final) < n {
		m, err := results.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("%d of %d results: %v", len(final), n, err)
		}
		var r events.ResultData
		if _, err := events.DecodeData(m.Header, m.Data, &r); err != nil || r.Status != events.StatusOK {
			t.Fatalf("result %+v, %v", r, err)
		}
		final[r.CallID] = true
	}
	waitQueueEmpty(t, s)
	if calls, runs := ctr.total(); calls != n || runs != n {
		t.Fatalf("%d calls ran %d times, want %d and %d", calls, runs, n, n)
	}
}

// TestServerRestartUnderLoadLosesNoneAndRunsNoneTwice restarts the server
// while a worker has calls running and queued: the worker reconnects and
// asks for calls again, every call gets its result, none runs twice.
func TestServerRestartUnderLoadLosesNoneAndRunsNoneTwice(t *testing.T) {
	s := testenv.StartNATS(t, t.TempDir())
	var ctr counter
	started := make(chan string, 1000)
	reg := testRegistry(t, &ctr, started)
	w := startWorker(t, s.ClientURL(), reg, Config{Name: "w1", Concurrency: 8, Bus: fastBus})
	c, nc := newClient(t, s, "restart")
	results, err := nc.SubscribeSync(events.ResultsOf("restart"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 60
	submit := func(i int) {
		for {
			_, err := c.Submit(ctxT(t), "sleep", map[string]any{"ms": 20}, client.WithID(fmt.Sprintf("r-%d", i)))
			if err == nil {
				return
			}
			if ctxT(t).Err() != nil {
				t.Fatalf("submit r-%d: %v", i, err)
			}
			time.Sleep(50 * time.Millisecond) // reconnecting
		}
	}
	for i := range n / 2 {
		submit(i)
	}
	testenv.Recv(t, started, "started") // calls are running
	// The worker and the clients reconnect to the restarted server.
	testenv.RestartNATS(t, s)
	for i := n / 2; i < n; i++ {
		submit(i)
	}
	// Results come live; one published while the client reconnected is
	// read from the results stream.
	done := map[string]bool{}
	for len(done) < n {
		if ctxT(t).Err() != nil {
			t.Fatalf("%d of %d results", len(done), n)
		}
		m, err := results.NextMsg(time.Second)
		if err != nil {
			for i := range n {
				id := fmt.Sprintf("r-%d", i)
				if r, err := c.Result(ctxT(t), id); !done[id] && err == nil && r.Status.Final() {
					if r.Status != events.StatusOK {
						t.Fatalf("%s: %+v", id, r)
					}
					done[id] = true
				}
			}
			continue
		}
		var r events.ResultData
		if _, err := events.DecodeData(m.Header, m.Data, &r); err != nil || r.Status != events.StatusOK {
			t.Fatalf("result %+v, %v", r, err)
		}
		done[r.CallID] = true
	}
	if calls, runs := ctr.total(); calls != n || runs != n {
		t.Fatalf("%d calls ran %d times, want %d and %d", calls, runs, n, n)
	}
	// Stop before the restarted server's cleanup shuts it down.
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestWorkerKilledMidLoadLosesNoneAndRunsNoneTwice kills one of two
// workers in the middle of a load, as SIGKILL would from the server's
// side: its connection drops with calls running and their tools cut
// short. Every call still gets a final result (ok, or interrupted for a
// call the dead worker had started) and no call runs twice.
func TestWorkerKilledMidLoadLosesNoneAndRunsNoneTwice(t *testing.T) {
	var ctr counter
	started := make(chan string, 1000)
	reg := testRegistry(t, &ctr, started)
	const n = 80
	status := killOneOfTwo(t, reg, started, "sleep", n)
	interrupted := 0
	for id, st := range status {
		runs := ctr.get(id)
		switch st {
		case events.StatusOK:
			if runs != 1 {
				t.Errorf("%s: ok after %d runs", id, runs)
			}
		case events.StatusInterrupted:
			interrupted++
			if runs > 1 {
				t.Errorf("%s: interrupted after %d runs", id, runs)
			}
		default:
			t.Errorf("%s: %s", id, st)
		}
	}
	if interrupted == 0 {
		t.Fatal("no call was interrupted: the kill came too late to prove anything")
	}
}

// killOneOfTwo submits n calls of tool (each sleeping 100 ms; started
// hears each execution) to two workers, cuts the first worker off the
// server once it runs four of them, and returns each call's final status
// (a call answered two different final statuses fails the test) once
// the queue is empty.
func killOneOfTwo(t *testing.T, reg *tools.Registry, started <-chan string, tool string, n int) map[string]events.Status {
	t.Helper()
	s := testenv.StartNATS(t, "")
	w1 := startWorker(t, s.ClientURL(), reg, Config{Name: "w1", Concurrency: 8, Bus: fastBus})
	startWorker(t, s.ClientURL(), reg, Config{Name: "w2", Concurrency: 8, Bus: fastBus})
	c, nc := newClient(t, s, "killed")
	results, err := nc.SubscribeSync(events.ResultsOf("killed"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := c.Submit(ctxT(t), tool, map[string]any{"ms": 100}, client.WithID(fmt.Sprintf("k-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for w1.w.Executions() < 4 {
		testenv.Recv(t, started, "started")
	}
	w1.w.nc.Close()   // the server sees the worker vanish
	w1.w.execCancel() // and its tools stop where they are
	status := map[string]events.Status{}
	for len(status) < n {
		if ctxT(t).Err() != nil {
			t.Fatalf("%d of %d results", len(status), n)
		}
		m, err := results.NextMsg(time.Second)
		if err != nil {
			continue
		}
		var r events.ResultData
		if _, err := events.DecodeData(m.Header, m.Data, &r); err != nil {
			t.Fatal(err)
		}
		if !r.Status.Final() {
			continue
		}
		if prev, ok := status[r.CallID]; ok && prev != r.Status {
			t.Errorf("%s answered %s, then %s", r.CallID, prev, r.Status)
		}
		status[r.CallID] = r.Status
	}
	waitQueueEmpty(t, s)
	storedOnce(t, s, "killed", n)
	return status
}

// storedOnce checks that the results stream holds exactly one result for
// each of n calls of agent.
func storedOnce(t *testing.T, s *testenv.Server, agent string, n int) {
	t.Helper()
	_, js := s.Connect(t)
	st, err := js.Stream(ctxT(t), bus.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctxT(t), jetstream.WithSubjectFilter(events.ResultsOf(agent)))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.State.Subjects) != n {
		t.Fatalf("results stored for %d calls, want %d", len(info.State.Subjects), n)
	}
	for subj, k := range info.State.Subjects {
		if k != 1 {
			t.Errorf("%s: %d results stored, want 1", subj, k)
		}
	}
}

// TestWorkerComesBackWhenItsConsumerReturns deletes the shared consumer
// under a running worker (an operator's mistake): the server refuses its
// pull requests, and once the consumer is provisioned again the worker
// takes calls again. Its refusals are logged, not repeated at once: the
// count of warnings while the consumer is missing stays far below the
// count of requests an immediate retry would send.
func TestWorkerComesBackWhenItsConsumerReturns(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	logs := &countingHandler{match: "pull request refused", seen: make(chan struct{}, 1000)}
	startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Name: "w1", Concurrency: 4, Bus: fastBus, Logger: slog.New(logs)})
	_, js := s.Connect(t)
	c, _ := newClient(t, s, "back")
	if r, err := c.Call(ctxT(t), "echo", map[string]any{"text": "before"}); err != nil || r.Status != events.StatusOK {
		t.Fatalf("before: %+v %v", r, err)
	}
	if err := js.DeleteConsumer(ctxT(t), bus.StreamCalls, bus.ConsumerWorkers); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctxT(t), "echo", map[string]any{"text": "after"}, client.WithID("after-1")); err != nil {
		t.Fatal(err)
	}
	// The worker's requests (asked before the deletion, or after) are
	// refused: wait for two refusals.
	for range 2 {
		select {
		case <-logs.seen:
		case <-ctxT(t).Done():
			t.Fatal("no refusal logged")
		}
	}
	if n := logs.n.Load(); n > 20 {
		t.Fatalf("%d refusals logged by then: the worker retries at once", n)
	}
	if err := bus.Provision(ctxT(t), js, fastBus); err != nil {
		t.Fatal(err)
	}
	r, err := c.Wait(ctxT(t), "after-1")
	if err != nil || r.Status != events.StatusOK || r.Output != "after" {
		t.Fatalf("after: %+v %v", r, err)
	}
}

// countingHandler counts log records whose message contains match.
type countingHandler struct {
	match string
	n     atomic.Int64
	seen  chan struct{}
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		h.n.Add(1)
		select {
		case h.seen <- struct{}{}:
		default:
		}
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
