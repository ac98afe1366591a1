package client_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestCallsWaitingTogetherShareOneSubscription: calls of one client
// waiting at once each get their own result from the client's one
// subscription to its agent's results, and once none waits the client
// holds no subscription.
func TestCallsWaitingTogetherShareOneSubscription(t *testing.T) {
	dir, in, srv := installServer(t)
	const calls = 8
	started, release := make(chan struct{}, calls), make(chan struct{})
	runWorker(t, srv, in, holdRegistry(started, release))
	c, nc := agentConn(t, srv, in, dir, "agent-10")
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
	if n := nc.NumSubscriptions() - before; n != 0 {
		t.Fatalf("%d subscriptions left once no call waits, want 0", n)
	}
}
