package test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/teststack"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// executionEvents counts the execution audit events of call id stored in
// the audit stream.
func executionEvents(t *testing.T, js jetstream.JetStream, id string) int {
	t.Helper()
	n := 0
	for _, m := range auditMsgs(t, js) {
		if m.callID == id && m.kind == events.AuditExecution {
			n++
		}
	}
	return n
}

// auditStream is the audit stream.
func auditStream(t *testing.T, js jetstream.JetStream) jetstream.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, bus.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// auditUnavailable makes the audit stream refuse every publish until
// the function it returns is called: its subjects no longer take the
// audit subjects, so a publish finds no stream, as while it has no
// leader or was deleted; what it stored stays.
func auditUnavailable(t *testing.T, js jetstream.JetStream) (restore func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := auditStream(t, js)
	cfg := s.CachedInfo().Config
	off := cfg
	off.Subjects = []string{"unavailable.audit.>"}
	if _, err := js.UpdateStream(ctx, off); err != nil {
		t.Fatal(err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
}

// auditStack starts a NATS server for workers to share, and a workspace.
func auditStack(t *testing.T) (*testenv.Server, jetstream.JetStream, string) {
	t.Helper()
	testenv.LookPath(t, "bwrap", "bubblewrap")
	srv := testenv.StartNATS(t, "")
	_, js := srv.Connect(t)
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "hello\n")
	return srv, js, ws
}

// callUnaudited makes the audit stream unavailable and has alice's bash
// call id run to its result; the function it returns makes the stream
// available again.
func callUnaudited(t *testing.T, url string, js jetstream.JetStream, id string) (restore func()) {
	t.Helper()
	restore = auditUnavailable(t, js)
	c := teststack.Client(t, url, "alice")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := c.Call(ctx, "bash", map[string]any{"command": "echo ran"}, client.WithID(id))
	if err != nil || res.Status != events.StatusOK {
		t.Fatalf("result = %+v, %v", res, err)
	}
	return restore
}

// auditedOnce waits up to within for call id's execution event, then
// for its message to be acked, and requires exactly one event.
func auditedOnce(t *testing.T, js jetstream.JetStream, id string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	n := 0
	for ; n == 0 && time.Now().Before(deadline); time.Sleep(time.Second) {
		n = executionEvents(t, js, id)
	}
	if n != 1 {
		t.Fatalf("call %s has %d execution events once the stream is back, want 1", id, n)
	}
	waitAcked(t, js) // its redelivery was acked: nothing of it waits any more
	if n := executionEvents(t, js, id); n != 1 {
		t.Fatalf("call %s has %d execution events, want 1", id, n)
	}
}

// TestStoppedWorkerLeavesUnauditedCallForRedelivery is the one-node
// reproduction: the audit stream cannot store anything, a bash call runs
// and its result is stored, and its worker is stopped (as SIGTERM stops
// it). The call must not be finished without its execution event: once
// the stream is back, its redelivery stores that event, exactly once.
func TestStoppedWorkerLeavesUnauditedCallForRedelivery(t *testing.T) {
	srv, js, ws := auditStack(t)
	opts := func(name string) func(*daemon.Options) {
		return func(o *daemon.Options) {
			o.NATSURL, o.Name, o.ShutdownGrace = srv.ClientURL(), name, 3*time.Second
		}
	}
	first := startProcess(t, ws, opts("first"))
	restore := callUnaudited(t, srv.ClientURL(), js, "unaudited-1")
	if err := first.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	restore()
	if n := executionEvents(t, js, "unaudited-1"); n != 0 {
		t.Fatalf("%d execution events stored while the stream was unavailable", n)
	}
	second := startProcess(t, ws, opts("second"))
	auditedOnce(t, js, "unaudited-1", 90*time.Second)
	out, _, code := second.toolctl(t, "audit", "--verify")
	if code != 0 {
		t.Fatalf("audit --verify = %d\n%s", code, out)
	}
}

// waitAcked waits until the workers consumer has no call delivered and
// unacked.
func waitAcked(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for {
		ci, err := js.Consumer(ctx, bus.StreamCalls, bus.ConsumerWorkers)
		if err == nil {
			info, err := ci.Info(ctx)
			if err == nil && info.NumAckPending == 0 && info.NumPending == 0 {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal("calls still unacked")
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// auditMsg is one stored audit message as the tests look at it.
type auditMsg struct {
	seq                     uint64
	chain, callID, kind, id string
	checkpoint, final       bool
	chainSeq                uint64
}

// auditMsgs lists the audit stream's messages.
func auditMsgs(t *testing.T, js jetstream.JetStream) []auditMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, bus.StreamAudit, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.SubjectAudit}})
	if err != nil {
		t.Fatal(err)
	}
	var out []auditMsg
	for {
		batch, err := cons.FetchNoWait(500)
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, _ := m.Metadata()
			am := auditMsg{seq: md.Sequence.Stream, id: m.Headers().Get(nats.MsgIdHdr)}
			if strings.HasPrefix(m.Subject(), events.AuditCheckpointSubject("")) {
				var cp struct { // events.AuditCheckpointData, as far as the tests look
					Chain string `json:"chain"`
					Seq   uint64 `json:"seq"`
					Final bool   `json:"final"`
				}
				if _, err := events.DecodeData(m.Headers(), m.Data(), &cp); err != nil {
					t.Fatal(err)
				}
				am.checkpoint, am.final, am.chain, am.chainSeq = true, cp.Final, cp.Chain, cp.Seq
			} else {
				var a events.AuditData
				if _, err := events.DecodeData(m.Headers(), m.Data(), &a); err != nil {
					t.Fatal(err)
				}
				am.chain, am.callID, am.kind, am.chainSeq = a.Chain, a.CallID, a.Kind, a.Seq
			}
			out = append(out, am)
		}
		if got == 0 {
			return out
		}
	}
}

// deleteAudit removes the audit messages keep says no to, as an admin
// can.
func deleteAudit(t *testing.T, js jetstream.JetStream, remove func(auditMsg) bool) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := auditStream(t, js)
	n := 0
	for _, m := range auditMsgs(t, js) {
		if remove(m) {
			if err := s.DeleteMsg(ctx, m.seq); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	return n
}

// TestVerifyDetectsRemovedAudit: after two worker runs whose trail
// verifies, each removal an admin can make is reported and fails
// --verify: the last event of a run (its tail), its closing checkpoint
// alone, a whole run's chain, and one call's execution event (the
// results stream still holds its result).
func TestVerifyDetectsRemovedAudit(t *testing.T) {
	srv, js, ws := auditStack(t)
	opts := func(name string) func(*daemon.Options) {
		return func(o *daemon.Options) { o.NATSURL, o.Name = srv.ClientURL(), name }
	}
	for _, name := range []string{"first", "second"} {
		p := startProcess(t, ws, opts(name))
		c := p.client(t, "alice")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		for i := range 3 {
			if res, err := c.Call(ctx, "read", map[string]any{"path": "README.md"}, client.WithID(name+"-"+string(rune('a'+i)))); err != nil || res.Status != events.StatusOK {
				t.Fatalf("call: %+v %v", res, err)
			}
		}
		cancel()
		if err := p.stop(); err != nil {
			t.Fatal(err)
		}
	}
	// The worker that answers toolctl: a third run, left running.
	third := startProcess(t, ws, opts("third"))
	verify := func() (string, int) {
		out, _, code := third.toolctl(t, "audit", "--verify", "--live-within", "2s")
		return out, code
	}
	if out, code := verify(); code != 0 {
		t.Fatalf("the untouched trail does not verify (%d):\n%s", code, out)
	}
	var chains = map[string]string{} // worker name -> chain
	for _, m := range auditMsgs(t, js) {
		for _, name := range []string{"first", "second"} {
			if strings.HasPrefix(m.chain, name+"-") {
				chains[name] = m.chain
			}
		}
	}
	snapshot := snapshotAudit(t, js)
	tests := []struct {
		name   string
		remove func(auditMsg) bool
		want   []string
	}{
		{"tail", func(m auditMsg) bool { return m.chain == chains["second"] && !m.checkpoint && m.callID == "second-c" },
			[]string{"says 3 events; the chain has 2", "call second-c of agent alice: final result ok without an execution audit event"}},
		{"closing checkpoint", func(m auditMsg) bool { return m.chain == chains["second"] && m.final },
			[]string{"ends without its closing checkpoint"}},
		{"tail and closing checkpoint", func(m auditMsg) bool {
			return m.chain == chains["second"] && (m.final || m.callID == "second-c")
		}, []string{"ends without its closing checkpoint", "call second-c of agent alice: final result ok without an execution audit event"}},
		{"whole chain", func(m auditMsg) bool { return m.chain == chains["first"] },
			[]string{"chain " + chains["first"] + ": 0 events", "the whole chain is missing: removed", "call first-a of agent alice: final result ok without an execution audit event"}},
		{"one execution event", func(m auditMsg) bool { return m.callID == "first-b" && m.kind == events.AuditExecution },
			[]string{"events 2-2 are missing", "call first-b of agent alice: final result ok without an execution audit event"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			restoreAudit(t, js, snapshot)
			time.Sleep(2 * time.Second) // every closed chain's checkpoints are older than --live-within
			if n := deleteAudit(t, js, tt.remove); n == 0 {
				t.Fatal("nothing removed")
			}
			out, code := verify()
			if code == 0 {
				t.Fatalf("--verify passed with events removed:\n%s", out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("--verify does not say %q:\n%s", w, out)
				}
			}
		})
	}
}

// snapshotAudit copies the audit stream's messages; restoreAudit puts
// the stream back to them (purged and published again, in order).
func snapshotAudit(t *testing.T, js jetstream.JetStream) []*nats.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := auditStream(t, js)
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*nats.Msg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		h := nats.Header{}
		for k, v := range m.Header {
			if k != nats.MsgIdHdr {
				h[k] = v
			}
		}
		out = append(out, &nats.Msg{Subject: m.Subject, Header: h, Data: m.Data})
	}
	return out
}

func restoreAudit(t *testing.T, js jetstream.JetStream, msgs []*nats.Msg) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := auditStream(t, js)
	if err := s.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKilledWorkerBetweenResultAndAudit: a worker is killed (SIGKILL)
// after its call's result is stored and before its execution event is
// (the audit stream cannot store it meanwhile). The call was not
// finished: its redelivery, once the stream is back, finds the stored
// result without its execution event and stores that event, exactly
// once. The killed run's chain is an open tail while it could still be
// a running worker's, and reported as lost once its checkpoints are old.
func TestKilledWorkerBetweenResultAndAudit(t *testing.T) {
	srv, js, ws := auditStack(t)
	bin := filepath.Join(t.TempDir(), "worker")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/worker").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--nats", srv.ClientURL(), "--name", "killed", "--workspace", ws)
	startUntil(t, cmd, "takes calls", func(l string) bool { return strings.Contains(l, "worker taking calls") })
	restore := callUnaudited(t, srv.ClientURL(), js, "killed-1")
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	restore()
	if n := executionEvents(t, js, "killed-1"); n != 0 {
		t.Fatalf("%d execution events stored while the stream was unavailable", n)
	}
	second := startProcess(t, ws, func(o *daemon.Options) { o.NATSURL, o.Name = srv.ClientURL(), "second" })
	auditedOnce(t, js, "killed-1", 150*time.Second)
	if out, _, code := second.toolctl(t, "audit", "--verify"); code != 0 {
		t.Fatalf("audit --verify = %d, want 0 (the killed run's chain may still be a live worker's):\n%s", code, out)
	}
	time.Sleep(2 * time.Second)
	out, _, code := second.toolctl(t, "audit", "--verify", "--live-within", "1s")
	if code == 0 || !strings.Contains(out, "ends without its closing checkpoint") {
		t.Fatalf("audit --verify --live-within 1s = %d, want the killed run's lost tail reported:\n%s", code, out)
	}
}

// TestAuditStreamDeletedUnderLoad: the audit stream is deleted while a
// worker runs. No call finishes unaudited: the worker creates the stream
// again and the calls after the deletion are audited, each once; and
// --verify reports exactly what the deletion removed — the calls before
// it as results without their execution event, and the chain's opening
// and first events as missing — and nothing of the calls after it.
func TestAuditStreamDeletedUnderLoad(t *testing.T) {
	srv, js, ws := auditStack(t)
	p := startProcess(t, ws, func(o *daemon.Options) { o.NATSURL, o.Name = srv.ClientURL(), "deleted" })
	c := p.client(t, "alice")
	call := func(id string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if res, err := c.Call(ctx, "read", map[string]any{"path": "README.md"}, client.WithID(id)); err != nil || res.Status != events.StatusOK {
			t.Fatalf("call %s: %+v %v", id, res, err)
		}
	}
	before, after := []string{"before-1", "before-2", "before-3"}, []string{"after-1", "after-2", "after-3"}
	for _, id := range before {
		call(id)
	}
	waitAcked(t, js)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, bus.StreamAudit); err != nil {
		t.Fatal(err)
	}
	for _, id := range after {
		call(id)
	}
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := js.Stream(ctx, bus.StreamAudit); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the audit stream was not created again")
		}
	}
	for _, id := range after {
		auditedOnce(t, js, id, 60*time.Second)
	}
	out, _, code := p.toolctl(t, "audit", "--verify")
	if code == 0 {
		t.Fatalf("--verify passed with the audit stream deleted:\n%s", out)
	}
	for _, want := range []string{"its opening checkpoint is missing", "events 1-3 are missing",
		"call before-1 of agent alice", "call before-2 of agent alice", "call before-3 of agent alice",
		"6 calls with a final result, 3 without their execution event"} {
		if !strings.Contains(out, want) {
			t.Errorf("--verify does not say %q:\n%s", want, out)
		}
	}
	for _, id := range after {
		if strings.Contains(out, "call "+id+" ") {
			t.Errorf("--verify reports %s, audited after the deletion:\n%s", id, out)
		}
	}
}
