package worker

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	papproval "github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// callsBucket opens the calls bucket and returns it with the number of
// records its stream holds.
func callsBucket(t *testing.T, s *testenv.Server) (jetstream.KeyValue, uint64) {
	t.Helper()
	_, js := s.Connect(t)
	kv, err := js.KeyValue(ctxT(t), bus.BucketCalls)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return kv, st.Values()
}

// A pure tool's allowed call runs once and stores nothing in the calls
// bucket; a call of a tool with effects is claimed there first.
func TestPureCallRunsWithoutAClaim(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: fastBus})
	c, _ := newClient(t, s, "p")
	for i, id := range []string{"pure-1", "pure-2", "pure-3"} {
		res, err := c.Call(ctxT(t), "peek", map[string]any{"text": "x"}, client.WithID(id))
		if err != nil || res.Status != events.StatusOK || res.Output != "x" {
			t.Fatalf("call %d: %+v %v", i, res, err)
		}
	}
	kv, n := callsBucket(t, s)
	if n != 0 {
		t.Fatalf("the calls bucket holds %d records after three pure calls, want 0", n)
	}
	if _, err := kv.Get(ctxT(t), CallKey("p", "pure-1")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("record of a pure call: %v, want none", err)
	}
	if res, err := c.Call(ctxT(t), "echo", map[string]any{"text": "y"}, client.WithID("effect-1")); err != nil || res.Status != events.StatusOK {
		t.Fatalf("echo: %+v %v", res, err)
	}
	if _, err := kv.Get(ctxT(t), CallKey("p", "effect-1")); err != nil {
		t.Fatalf("a call with effects left no claim: %v", err)
	}
	if calls, runs := ctr.total(); calls != 4 || runs != 4 {
		t.Fatalf("%d calls ran %d times, want 4 and 4", calls, runs)
	}
}

// A pure call the gate asks about is claimed like any call before it
// parks (its record says parked), and runs once after the approval.
func TestPureCallThatParksIsClaimed(t *testing.T) {
	r := newApprovalRig(t)
	c, _ := newClient(t, r.s, "asker")
	final := make(chan *events.ResultData, 1)
	pending := make(chan events.ResultData, 1)
	go func() {
		// An error (the test ended first) leaves res nil; waitFinal fails on it.
		res, _ := c.Call(ctxT(t), "peek", map[string]any{"text": "look"}, client.WithID("pure-ask"),
			client.OnPending(func(p events.ResultData) { pending <- p }))
		final <- res
	}()
	select {
	case p := <-pending:
		if p.Status != events.StatusPending {
			t.Fatalf("pending = %+v", p)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no pending result")
	}
	kv, _ := callsBucket(t, r.s)
	e, err := kv.Get(ctxT(t), CallKey("asker", "pure-ask"))
	if err != nil {
		t.Fatalf("parked pure call has no record: %v", err)
	}
	var rec record
	if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.State != stateParked {
		t.Fatalf("record %s (%v), want state parked", e.Value(), err)
	}
	if r.ctr.get("pure-ask") != 0 {
		t.Fatal("ran before approval")
	}
	args, _ := json.Marshal(map[string]any{"text": "look"})
	r.decide(t, "pure-ask", papproval.ArgsHash(c.Agent(), "peek", args), papproval.Approve, "alice", "")
	res := waitFinal(t, final)
	if res.Status != events.StatusOK || res.Output != "look" {
		t.Fatalf("final = %+v", res)
	}
	if n := r.ctr.get("pure-ask"); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

// A worker dies with pure calls running: their redeliveries run them again
// on the other worker (nothing to interrupt: a pure call changed nothing),
// every call is answered ok, and each has exactly one stored result.
func TestWorkerKilledMidLoadAnswersEveryPureCallOnce(t *testing.T) {
	var ctr counter
	started := make(chan string, 1000)
	reg := testRegistry(t, &ctr, started)
	reg.MustRegister(&tools.Tool{
		Name: "nap", Description: "sleeps ms milliseconds, changing nothing", Kind: policy.KindRead, Pure: true,
		Parameters: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer","minimum":0}},"required":["ms"]}`),
		Handler: tools.HandlerFunc(func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
			ctr.inc(c.ID)
			started <- c.ID
			ms, _ := c.Args["ms"].(json.Number).Int64()
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return &tools.Output{Content: "napped"}, nil
			case <-ctx.Done():
				return &tools.Output{Content: "partial"}, ctx.Err()
			}
		}),
	})
	rerun := 0
	for id, st := range killOneOfTwo(t, reg, started, "nap", 60) {
		if st != events.StatusOK {
			t.Errorf("%s: %s, want ok", id, st)
		}
		if ctr.get(id) > 1 {
			rerun++
		}
	}
	if rerun == 0 {
		t.Fatal("no call was run again: the kill came too late to prove anything")
	}
}
