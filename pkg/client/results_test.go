package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// TestCallsWaitingTogetherShareOneSubscription: calls of one client
// waiting at once each get their own result from the client's one
// subscription to its agent's results, and once none has waited for the
// linger the client holds no subscription.
func TestCallsWaitingTogetherShareOneSubscription(t *testing.T) {
	dir, in, srv := installServer(t)
	const calls = 8
	started, release := make(chan struct{}, calls), make(chan struct{})
	runWorker(t, srv, in, holdRegistry(started, release))
	c, nc := agentConn(t, srv, in, dir, "agent-10")
	client.SetResultsLinger(c, 200*time.Millisecond)
	// The connection's one subscription for the replies to its requests
	// (the calls' publishes are requests) is made by its first request.
	if _, err := c.Tools(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := nc.NumSubscriptions()

	type got struct {
		id  string
		res *events.ResultData
		err error
	}
	done := make(chan got, calls)
	for i := range calls {
		id := fmt.Sprintf("shared-%d", i)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), testenv.Patience)
			defer cancel()
			r, err := c.Call(ctx, "hold", map[string]any{}, client.WithID(id))
			done <- got{id, r, err}
		}()
	}
	// Every call waits (its subscription made before its publish) once
	// the worker runs all of them.
	for range calls {
		testenv.Recv(t, started, "a call running")
	}
	if n := nc.NumSubscriptions() - before; n != 1 {
		t.Fatalf("%d subscriptions for %d waiting calls, want 1", n, calls)
	}
	close(release)
	for range calls {
		g := testenv.Recv(t, done, "a call's result")
		if g.err != nil || g.res.Status != events.StatusOK || g.res.CallID != g.id {
			t.Fatalf("call %s: %+v, %v", g.id, g.res, g.err)
		}
	}
	for end := time.Now().Add(testenv.Patience); nc.NumSubscriptions() != before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d subscriptions left once no call waited for the linger, want 0", nc.NumSubscriptions()-before)
		}
	}
}

// TestCallsShareOneResultsSubscription: calls made at once on one
// client, two of them under one id, each get their own call's result
// from the client's one results subscription (the call of the shared id
// runs once and both waiters get its result); the subscription is
// removed once no call has waited for the linger.
func TestCallsShareOneResultsSubscription(t *testing.T) {
	dir, in, srv := installServer(t)
	var runs atomic.Int64
	reg := tools.NewRegistry()
	reg.MustRegister(&tools.Tool{
		Name: "echo_id", Description: "Answers its call's id.", Kind: policy.KindOther,
		Parameters: json.RawMessage(`{"type":"object"}`),
		Handler: tools.HandlerFunc(func(_ context.Context, c *tools.Call) (*tools.Output, error) {
			runs.Add(1)
			time.Sleep(20 * time.Millisecond) // the calls overlap
			return &tools.Output{Content: c.ID}, nil
		}),
	})
	runWorker(t, srv, in, reg)
	c := agentClient(t, srv, in, dir, "agent-9")
	client.SetResultsLinger(c, 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids := []string{"shared", "shared"}
	for i := range 30 {
		ids = append(ids, fmt.Sprint("call-", i))
	}
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.Call(ctx, "echo_id", nil, client.WithID(id))
			if err != nil || r.Status != events.StatusOK || r.Output != id {
				t.Errorf("call %s: %+v, %v", id, r, err)
			}
		}()
	}
	wg.Wait()
	if n := runs.Load(); n != int64(len(ids)-1) {
		t.Errorf("the tool ran %d times, want %d", n, len(ids)-1)
	}
	if !client.ResultsSubscribed(c) {
		t.Fatal("the results subscription is gone at once")
	}
	for end := time.Now().Add(10 * time.Second); client.ResultsSubscribed(c); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the results subscription outlives its linger")
		}
	}
	// The next call subscribes again.
	if r, err := c.Call(ctx, "echo_id", nil, client.WithID("after")); err != nil || r.Output != "after" {
		t.Fatalf("call after the linger: %+v, %v", r, err)
	}
}
