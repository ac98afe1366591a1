package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestCallFindsAResultMissedInAReconnect: a result published while the
// agent's connection is down never reaches its subscription; the waiting
// call, seeing the reconnect, looks up the stored result and returns it.
func TestCallFindsAResultMissedInAReconnect(t *testing.T) {
	dir, in, srv := installServer(t)
	started, release := make(chan struct{}, 1), make(chan struct{})
	runWorker(t, srv, in, holdRegistry(started, release))

	// The agent reconnects only once the result is stored.
	stored, down := make(chan struct{}), make(chan struct{}, 1)
	c, nc := agentConn(t, srv, in, dir, "agent-9",
		nats.CustomReconnectDelay(func(int) time.Duration { <-stored; return 0 }),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { down <- struct{}{} }))
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		r, err := c.Call(ctx, "hold", map[string]any{}, client.WithID("missed-1"))
		done <- outcome{r, err}
	}()
	testenv.Recv(t, started, "the call running")
	cid, err := nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.DisconnectClientByID(cid); err != nil {
		t.Fatal(err)
	}
	testenv.Recv(t, down, "the agent's connection down")
	close(release)

	// An observer with a worker's rights sees the result stored.
	ocreds, err := in.MintCreds(identity.RoleWorker, "observer")
	if err != nil {
		t.Fatal(err)
	}
	onc, err := nats.Connect(srv.ClientURL(), ocreds.NATSOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer onc.Close()
	js, err := jetstream.New(onc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Patience)
	defer cancel()
	for {
		st, err := js.Stream(ctx, "TOOLGATE_RESULTS")
		if err == nil {
			if _, err = st.GetLastMsgForSubject(ctx, events.ResultSubject("agent-9", "missed-1")); err == nil {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("the result was never stored: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stored)

	o := testenv.Recv(t, done, "the call's result")
	if o.err != nil || o.res.Status != events.StatusOK || o.res.Output != "released" {
		t.Fatalf("call: %+v, %v", o.res, o.err)
	}
}
