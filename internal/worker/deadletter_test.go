package worker

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestDeadLetterAnnouncedWithNoWorkerIsHandledLater proves the
// max-deliveries advisory is not missed when no worker listens at the
// moment it is announced: the call is dead-lettered and answered once a
// worker starts. So is a call fired by a schedule (a call that waited out
// its agent's bounds), whose server headers (Nats-Scheduler,
// Nats-Schedule-Next) the dead-letter stream would refuse.
func TestDeadLetterAnnouncedWithNoWorkerIsHandledLater(t *testing.T) {
	for name, fired := range map[string]bool{"published": false, "fired by a schedule": true} {
		t.Run(name, func(t *testing.T) { deadLetterHandledLater(t, fired) })
	}
}

func deadLetterHandledLater(t *testing.T, fired bool) {
	s := testenv.StartNATS(t, "")
	nc, js := s.Connect(t)
	cfg := bus.Config{AckWait: 500 * time.Millisecond, MaxDeliver: 2}
	if err := bus.Provision(ctxT(t), js, cfg); err != nil {
		t.Fatal(err)
	}
	c, _ := client.New(nc, "orphans", trusting(t))
	if !fired {
		if _, err := c.Submit(ctxT(t), "echo", map[string]any{"text": "x"}, client.WithID("orphan-1")); err != nil {
			t.Fatal(err)
		}
	} else {
		if _, err := js.PublishMsg(ctxT(t), waitCopy(storedMsg{echoCall(t, "orphans", "orphan-1"), 99}, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	// A consumer that takes the call and never acks it (a worker that
	// crashed every time), with no worker running.
	cons, err := js.Consumer(ctxT(t), bus.StreamCalls, bus.ConsumerWorkers)
	if err != nil {
		t.Fatal(err)
	}
	adv, err := js.Stream(ctxT(t), bus.StreamAdvisories)
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := adv.Info(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 1 {
			break
		}
		if ctxT(t).Err() != nil {
			t.Fatal("no max-deliveries advisory stored")
		}
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for range b.Messages() {
		}
	}
	var ctr counter
	startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: cfg})
	r, err := c.Wait(ctxT(t), "orphan-1")
	if err != nil || r.Status != events.StatusError || r.Error != CodeDeadLetter {
		t.Fatalf("result = %+v, %v; want a dead_letter error", r, err)
	}
	dlq, err := js.Stream(ctxT(t), bus.StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := dlq.Info(ctxT(t)); err != nil || info.State.Msgs != 1 {
		t.Fatalf("dead-letter stream: %+v, %v; want 1 message", info, err)
	}
	eventually(t, func() bool {
		info, err := adv.Info(ctxT(t))
		return err == nil && info.State.Msgs == 0
	})
	if ctr.get("orphan-1") != 0 {
		t.Fatal("the dead-lettered call ran")
	}
	waitQueueEmpty(t, s)
}
