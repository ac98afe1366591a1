package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestDeletedAuditStreamIsRecreated: a worker whose audit publishes find
// the audit stream deleted creates it again, so that the calls do not
// back up for good: each is audited, once, in the new stream.
func TestDeletedAuditStreamIsRecreated(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: fastBus, publishTimeout: 300 * time.Millisecond})
	c, nc := newClient(t, s, "deleted")
	js, _ := jetstream.New(nc)
	if err := js.DeleteStream(ctxT(t), bus.StreamAudit); err != nil {
		t.Fatal(err)
	}
	ids := []string{"d-1", "d-2", "d-3"}
	for _, id := range ids {
		if res, err := c.Call(ctxT(t), "echo", map[string]any{"text": id}, client.WithID(id)); err != nil || res.Status != events.StatusOK {
			t.Fatalf("%+v %v", res, err)
		}
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := js.Stream(ctxT(t), bus.StreamAudit); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the audit stream was not recreated")
		}
	}
	exec, _ := auditOf(t, js, "deleted", len(ids))
	for _, id := range ids {
		if exec[id].CallID != id {
			t.Fatalf("no execution event for %s: %v", id, exec)
		}
	}
	st, err := js.Stream(ctxT(t), bus.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctxT(t), jetstream.WithSubjectFilter(events.AuditSubject("deleted", ">")))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(info.State.Subjects); n != 1 || info.State.Subjects[events.AuditSubject("deleted", "echo")] != uint64(len(ids)) {
		t.Fatalf("audit events of the agent by subject: %v; want %d on echo", info.State.Subjects, len(ids))
	}
}

// TestCallsBackUpWhileUnaudited: while the audit stream cannot store, a
// call that ran keeps its message unacked (its heartbeat keeps it from
// redelivery) and its slot; once every slot holds such a call the
// worker takes no more calls, which wait in the stream; /readyz says
// why. Once the stream is back, every call is audited once and acked.
func TestCallsBackUpWhileUnaudited(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	r := startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: fastBus, Concurrency: 2, AgentConcurrency: -1, publishTimeout: 300 * time.Millisecond})
	c, nc := newClient(t, s, "backed")
	js, _ := jetstream.New(nc)
	restore := auditOff(t, js)
	results := make(chan *events.ResultData, 3)
	for _, id := range []string{"b-1", "b-2", "b-3"} {
		go func() {
			res, err := c.Call(ctxT(t), "echo", map[string]any{"text": id}, client.WithID(id))
			if err != nil {
				t.Error(err)
			}
			results <- res
		}()
	}
	for range 2 {
		if res := testenv.Recv(t, results, "result"); res.Status != events.StatusOK {
			t.Fatalf("result %+v", res)
		}
	}
	// Three ack waits: the running calls' heartbeats keep their messages.
	time.Sleep(3 * fastBus.AckWait)
	info := consumerInfo(t, js)
	if info.NumAckPending != 2 || info.NumPending != 1 || info.NumRedelivered != 0 {
		t.Fatalf("consumer: %d unacked, %d waiting, %d redelivered; want 2, 1, 0", info.NumAckPending, info.NumPending, info.NumRedelivered)
	}
	if calls, runs := ctr.total(); calls != 2 || runs != 2 {
		t.Fatalf("%d calls ran %d times while every slot waits for its audit; want 2, 2", calls, runs)
	}
	if n, _ := r.w.AuditBacklog(); n != 2 {
		t.Fatalf("audit backlog %d, want 2", n)
	}
	if err := r.w.Ready(); err == nil || !strings.Contains(err.Error(), "audit stream not storing") {
		t.Fatalf("ready = %v, want the audit stream named", err)
	}
	restore()
	if res := testenv.Recv(t, results, "result"); res.Status != events.StatusOK {
		t.Fatalf("result %+v", res)
	}
	exec, _ := auditOf(t, js, "backed", 3)
	for _, id := range []string{"b-1", "b-2", "b-3"} {
		if exec[id].CallID != id {
			t.Fatalf("no execution event for %s: %v", id, exec)
		}
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if info := consumerInfo(t, js); info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("calls still unacked once audited")
		}
	}
	if err := r.w.Ready(); err != nil {
		t.Fatalf("ready = %v once audited", err)
	}
}

func consumerInfo(t *testing.T, js jetstream.JetStream) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, bus.StreamCalls, bus.ConsumerWorkers)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestStoppedWorkerHandsBackUnauditedCall: a worker that stops while the
// audit stream cannot store keeps the call's events in its record and
// hands the call back (confirmed), so that the next worker stores them
// at once: with a five-minute ack wait, a call merely left unacked would
// wait all of it in the queue.
func TestStoppedWorkerHandsBackUnauditedCall(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	reg := testRegistry(t, &ctr, nil)
	slow := bus.Config{AckWait: 5 * time.Minute, MaxDeliver: 5}
	first := startWorker(t, s.ClientURL(), reg, Config{Name: "first", Bus: slow, ShutdownGrace: 500 * time.Millisecond, publishTimeout: 300 * time.Millisecond})
	c, nc := newClient(t, s, "handback")
	js, _ := jetstream.New(nc)
	restore := auditOff(t, js)
	if res, err := c.Call(ctxT(t), "echo", map[string]any{"text": "x"}, client.WithID("hb-1")); err != nil || res.Status != events.StatusOK {
		t.Fatalf("result %+v, %v", res, err)
	}
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	restore()
	startWorker(t, s.ClientURL(), reg, Config{Name: "second", Bus: slow})
	for end := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if info := consumerInfo(t, js); info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the call left unaudited still waits in the queue: it was not handed back")
		}
	}
	if exec, _ := auditOf(t, js, "handback", 1); exec["hb-1"].CallID != "hb-1" {
		t.Fatalf("no execution event for hb-1: %v", exec)
	}
	if calls, runs := ctr.total(); calls != 1 || runs != 1 {
		t.Fatalf("%d calls ran %d times, want 1 and 1", calls, runs)
	}
}

// auditOff makes the audit stream take no audit subject, so that every
// publish finds no stream, as while it has no leader; the stream and what
// it stored stay. restore gives it its subjects back.
func auditOff(t *testing.T, js jetstream.JetStream) (restore func()) {
	t.Helper()
	st, err := js.Stream(ctxT(t), bus.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	off := cfg
	off.Subjects = []string{"unavailable.audit.>"}
	if _, err := js.UpdateStream(ctxT(t), off); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := js.UpdateStream(ctxT(t), cfg); err != nil {
			t.Fatal(err)
		}
	}
}
