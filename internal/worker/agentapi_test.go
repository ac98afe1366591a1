package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestAgentAPI: the stored-result and task services answer the agent
// their subject names, with its own result or task only, and never on a
// reply subject outside an inbox.
func TestAgentAPI(t *testing.T) {
	s := testenv.StartNATS(t, "")
	w := openWorker(t, s, Config{Name: "w1"})
	stop, err := w.serveAgentAPI()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	nc, js := s.Connect(t)
	ctx := ctxT(t)
	if _, err := js.Publish(ctx, events.ResultSubject("alice", "c1"), []byte("result-of-alice")); err != nil {
		t.Fatal(err)
	}
	ask := func(subject string, body []byte) *nats.Msg {
		t.Helper()
		m, err := nc.Request(subject, body, 30*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
		return m
	}
	status := func(m *nats.Msg) string { return m.Header.Get(events.APIStatusHeader) }

	if m := ask(events.ResultAPISubject("alice", "c1"), nil); string(m.Data) != "result-of-alice" || status(m) != "" {
		t.Fatalf("alice's stored result: %q %q", m.Data, status(m))
	}
	for _, subj := range []string{events.ResultAPISubject("bob", "c1"), events.ResultAPISubject("alice", "c2")} {
		if m := ask(subj, nil); !strings.HasPrefix(status(m), "404") || len(m.Data) != 0 {
			t.Fatalf("%s: %q %q, want 404", subj, m.Data, status(m))
		}
	}

	// A task delegated to alice: handed to her, not to bob; bob cannot
	// acknowledge it; alice can.
	if _, err := js.Publish(ctx, events.TaskSubject("alice", "t1"), []byte("task-for-alice")); err != nil {
		t.Fatal(err)
	}
	if m := ask(events.TaskAPISubject("bob", "next"), []byte(`{"wait_ms":1000}`)); !strings.HasPrefix(status(m), "404") {
		t.Fatalf("bob's next task: %q %q", m.Data, status(m))
	}
	task := ask(events.TaskAPISubject("alice", "next"), []byte(`{"wait_ms":5000}`))
	ref := task.Header.Get(events.TaskAckHeader)
	if string(task.Data) != "task-for-alice" || task.Header.Get(events.TaskSubjectHeader) != events.TaskSubject("alice", "t1") || ref == "" {
		t.Fatalf("alice's next task: %q %v", task.Data, task.Header)
	}
	for _, body := range []string{ref, "$JS.ACK.TOOLGATE_TASKS.task_alice.>", "$JS.ACK.TOOLGATE_CALLS.workers.1.1.1.1.1"} {
		if m := ask(events.TaskAPISubject("bob", "ack"), []byte(body)); !strings.HasPrefix(status(m), "400") {
			t.Fatalf("bob acks %s: %q", body, status(m))
		}
	}
	if m := ask(events.TaskAPISubject("alice", "ack"), []byte(ref)); status(m) != "" {
		t.Fatalf("alice acks her task: %q", status(m))
	}
	str, err := js.Stream(ctx, bus.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := str.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("the acknowledged task is still in the work queue: %+v %v", info, err)
	}
	cons, err := js.Consumer(ctx, bus.StreamTasks, bus.TaskConsumerName("alice"))
	if err != nil || cons.CachedInfo().Config.InactiveThreshold != bus.TaskConsumerIdle {
		t.Fatalf("alice's task consumer is not removed when idle: %v", err)
	}

	// A reply subject outside an inbox gets nothing.
	spy, err := nc.SubscribeSync("toolgate.result.bob.>")
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{events.ResultAPISubject("alice", "c1"), events.TaskAPISubject("alice", "x")} {
		if err := nc.PublishRequest(subj, "toolgate.result.bob.c9", nil); err != nil {
			t.Fatal(err)
		}
	}
	if m, err := spy.NextMsg(2 * time.Second); err == nil {
		t.Fatalf("an answer landed on %s: %q", m.Subject, m.Data)
	}
}

// BenchmarkStoredResult is the cost of an agent's stored-result read
// through a worker (toolgate.api.result, what agents do now) beside a
// JetStream direct get of the same message (what they did before, with
// JetStream API access), on one server.
func BenchmarkStoredResult(b *testing.B) {
	s := testenv.StartNATS(b, "")
	w := openWorker(b, s, Config{Name: "w1"})
	stop, err := w.serveAgentAPI()
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	nc, js := s.Connect(b)
	if _, err := js.Publish(ctxT(b), events.ResultSubject("alice", "c1"), make([]byte, 1024)); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct{ name, subject string }{
		{"direct-get", "$JS.API.DIRECT.GET." + bus.StreamResults + "." + events.ResultSubject("alice", "c1")},
		{"worker", events.ResultAPISubject("alice", "c1")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				m, err := nc.Request(bc.subject, nil, 10*time.Second)
				if err != nil || len(m.Data) != 1024 {
					b.Fatalf("%v %d", err, len(m.Data))
				}
			}
		})
	}
}
