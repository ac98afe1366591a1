package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

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
