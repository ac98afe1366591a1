package identity_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/remote"
)

// op is one thing a client tries on the bus.
type op struct {
	name string
	do   func(nc *nats.Conn) error
}

func pub(subject string) op {
	return op{"publish " + subject, func(nc *nats.Conn) error { return nc.Publish(subject, []byte("forged")) }}
}

func sub(subject string) op {
	return op{"subscribe " + subject, func(nc *nats.Conn) error { _, err := nc.SubscribeSync(subject); return err }}
}

// violation runs o on a fresh connection as role name and returns the
// permissions violation the server answered, or nil. The server answers
// a refused PUB or SUB before the PONG of the flush that follows it.
func violation(t *testing.T, s *testenv.AuthServer, role identity.Role, name string, o op) error {
	t.Helper()
	nc, _ := s.ConnectAs(t, role, name)
	defer nc.Close()
	if err := o.do(nc); err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("%s: flush: %v", o.name, err)
	}
	if err := nc.LastError(); err != nil {
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("%s: %v, want a permissions violation or nothing", o.name, err)
		}
		return err
	}
	return nil
}

// TestForbiddenOperationsAreRefused tries, for each role, what it must
// not do, on a real server in operator mode with the bus provisioned,
// and expects the server's permissions violation each time; then checks
// that no forged message reached a stream.
func TestForbiddenOperationsAreRefused(t *testing.T) {
	s := testenv.StartAuthNATS(t)
	_, wjs := s.ConnectAs(t, identity.RoleWorker, "worker")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, wjs, bus.Config{}); err != nil {
		t.Fatalf("the worker cannot provision the bus: %v", err)
	}
	forbidden := map[identity.Role][]op{
		identity.RoleAgent: {
			pub("toolgate.call.bob.read"),                                     // calls as another agent
			pub("toolgate.cancel.bob.c1"),                                     // cancels another agent's call
			pub("$KV.toolgate_cancels.bob.c1"),                                // marks a call cancelled itself
			pub("$KV.toolgate_budgets.hourly.alice"),                          // rewrites its budget usage
			sub("toolgate.cancel.>"),                                          // hears cancellations
			pub("toolgate.result.alice.c1"),                                   // forged result, even its own
			pub("toolgate.progress.alice.c1"),                                 //
			pub("toolgate.approval.decision.c1"),                              // approving its own call
			pub("toolgate.approval.request.c1"),                               //
			pub("toolgate.event.policy_change"),                               //
			pub("$KV.toolgate_policy.policy"),                                 // policy push
			pub("$KV.toolgate_policy.amendments.a1"),                          // amendment
			pub("$KV.toolgate_approvals.call.c1"),                             // altering a parked call
			pub("$KV.toolgate_approvals.approver.UABC"),                       // registering an approver key
			pub("$KV.toolgate_calls.c1"),                                      // forging a call record
			pub("$JS.API.DIRECT.GET.TOOLGATE_RESULTS.toolgate.result.bob.c1"), // another's stored result
			// No JetStream API at all, not even for its own results and tasks.
			pub("$JS.API.DIRECT.GET.TOOLGATE_RESULTS.toolgate.result.alice.c1"),
			pub("$JS.API.INFO"),
			pub("$JS.API.CONSUMER.CREATE.TOOLGATE_TASKS.task_alice.toolgate.task.alice.>"),
			pub("$JS.API.CONSUMER.INFO.TOOLGATE_TASKS.task_alice"),
			pub("$JS.API.CONSUMER.MSG.NEXT.TOOLGATE_TASKS.task_alice"),
			pub("$JS.ACK.TOOLGATE_TASKS.task_alice.1.1.1.1.1"),
			pub("toolgate.api.result.bob.c1"), // asks for another's stored result
			pub("toolgate.api.task.bob.next"), // takes another's task
			pub("toolgate.api.task.bob.ack"),
			pub("$JS.API.DIRECT.GET.KV_toolgate_approvals.$KV.toolgate_approvals.call.c1"),
			pub("$JS.API.STREAM.INFO.TOOLGATE_RESULTS"),
			pub("$JS.API.CONSUMER.CREATE.TOOLGATE_RESULTS"),
			pub("$JS.API.STREAM.MSG.GET.TOOLGATE_RESULTS"),
			pub("$JS.ACK.TOOLGATE_CALLS.workers.1.1.1.1.1"),
			pub("_INBOX.worker.worker.box.1"), // a forged store acknowledgement of a claim, a result or an audit event
			sub("toolgate.result.bob.>"),
			sub("toolgate.result.>"),
			sub("toolgate.progress.bob.c1"),
			sub("toolgate.call.>"),
			sub("toolgate.approval.>"),
			sub("toolgate.audit.>"),
			sub("_INBOX.>"),
			sub("_INBOX_bob.>"),
			sub(">"),
			sub("$KV.>"),
			pub("toolgate.hook.stamp"), // asks a hook service itself
			sub("toolgate.hook.stamp"), // poses as a hook service
			// Delegation: only its own tasks, answers in its own space.
			pub("toolgate.task.bob.t1"),                                                  // forging a task
			pub("toolgate.task_result.bob.t1"),                                           // answering another's task
			pub("toolgate.task_progress.bob.t1"),                                         //
			pub("toolgate.task_cancel.bob.t1"),                                           // cancelling another's task
			pub("toolgate.task_cancel.alice.t1"),                                         //
			pub("$KV.toolgate_tasks.alice.t1"),                                           // forging a task record
			pub("$KV.toolgate_cache.x"),                                                  // poisoning the result cache
			pub("$JS.API.CONSUMER.CREATE.TOOLGATE_TASKS.task_bob.toolgate.task.bob.>"),   // another's tasks
			pub("$JS.API.CONSUMER.CREATE.TOOLGATE_TASKS.task_alice.toolgate.task.bob.>"), // its consumer, another's filter
			pub("$JS.API.CONSUMER.CREATE.TOOLGATE_TASKS.task_alice.toolgate.task.>"),     // a wider filter
			pub("$JS.API.CONSUMER.CREATE.TOOLGATE_TASKS.spy.toolgate.task.alice.>"),      // another consumer name
			pub("$JS.API.CONSUMER.MSG.NEXT.TOOLGATE_TASKS.task_bob"),                     //
			pub("$JS.API.CONSUMER.DELETE.TOOLGATE_TASKS.task_alice"),                     //
			pub("$JS.API.DIRECT.GET.TOOLGATE_TASK_RESULTS.toolgate.task_result.bob.t1"),  //
			sub("toolgate.task.>"),
			sub("toolgate.task_result.>"),
			sub("toolgate.task_cancel.bob.t1"),
		},
		identity.RoleApprover: {
			pub("toolgate.result.alice.c1"),
			pub("toolgate.call.alice.read"),
			pub("$KV.toolgate_policy.policy"),
			pub("$KV.toolgate_policy.amendments.a1"),
			pub("$KV.toolgate_approvals.call.c1"),
			pub("$KV.toolgate_calls.c1"),
			pub("$JS.API.STREAM.CREATE.X"),
			pub("$JS.API.STREAM.PURGE.TOOLGATE_APPROVALS"),
			pub("$JS.API.DIRECT.GET.TOOLGATE_RESULTS.toolgate.result.alice.c1"),
			sub("toolgate.result.>"),
			sub("toolgate.progress.>"),
			sub("toolgate.call.>"),
			sub("_INBOX.>"),
			sub("_INBOX_alice.>"),
		},
		identity.RoleWorker: {
			sub("toolgate.hook.stamp"), // poses as a hook service
			// It publishes calls only as the intake forwarding the agents'.
			pub("toolgate.approval.decision.c1"),
			pub("$KV.toolgate_policy.policy"),
			pub("toolgate.cancel.alice.c1"), // cancels are the agents' own
			sub("_INBOX.>"),
			sub("_INBOX_alice.>"),
			sub("toolgate.call.>"),
		},
		identity.RoleTool: {
			pub("toolgate.call.alice.read"),   // calls a tool
			pub("toolgate.result.alice.c1"),   // forged result
			pub("toolgate.remote.bob"),        // calls another remote tool
			pub("$SRV.INFO"),                  // discovery is the workers'
			pub("toolgate.event.tool.bob"),    // announces tools
			pub("$KV.toolgate_policy.policy"), //
			pub("$JS.API.STREAM.INFO.TOOLGATE_CALLS"),
			pub("toolgate.task_result.alice.t1"),
			pub("toolgate.task.alice.t1"),
			sub("toolgate.remote.bob"), // hears another tool's calls
			sub("toolgate.remote.>"),
			sub("toolgate.call.>"),
			sub("toolgate.result.>"),
			sub("_INBOX.>"),
			sub("_INBOX_alice.>"),
			sub(">"),
		},
		identity.RoleHook: {
			pub("toolgate.call.alice.read"),   // calls a tool
			pub("toolgate.result.alice.c1"),   // forged result
			pub("toolgate.hook.bob"),          // asks another hook
			pub("toolgate.progress.alice.c1"), //
			pub("toolgate.audit.alice.read"),  // forged audit
			pub("$KV.toolgate_policy.policy"), //
			sub("toolgate.hook.bob"),          // hears another hook's requests
			sub("toolgate.hook.>"),            //
			sub("toolgate.remote.alice"),      // a remote tool's calls
			sub("toolgate.call.>"),            //
			sub("toolgate.result.>"),          //
			sub("toolgate.progress.>"),        //
			sub("_INBOX.>"),                   //
			sub(">"),                          //
		},
		identity.RoleAdmin: {
			pub("toolgate.result.alice.c1"),
			pub("toolgate.progress.alice.c1"),
			pub("toolgate.call.alice.read"),
			pub("$KV.toolgate_approvals.call.c1"),
			pub("$KV.toolgate_calls.c1"),
			sub("_INBOX.>"),
			sub("_INBOX_alice.>"),
		},
	}
	for role, ops := range forbidden {
		for _, o := range ops {
			t.Run(string(role)+"/"+o.name, func(t *testing.T) {
				err := violation(t, s, role, "alice", o)
				if err == nil {
					t.Fatalf("%s as %s was allowed", o.name, role)
				}
				if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
					t.Fatalf("err = %v", err)
				}
			})
		}
	}
	// Effects: nothing forged was stored.
	_, ajs := s.ConnectAs(t, identity.RoleAdmin, "admin")
	for stream, subject := range map[string]string{
		bus.StreamResults:        "toolgate.result.alice.c1",
		bus.StreamCalls:          "toolgate.call.bob.read",
		bus.StreamApprovals:      "toolgate.approval.decision.c1",
		"KV_" + bus.BucketPolicy: "$KV.toolgate_policy.policy",
		bus.StreamTasks:          "toolgate.task.bob.t1",
		bus.StreamTaskResults:    "toolgate.task_result.bob.t1",
		"KV_" + bus.BucketTasks:  "$KV.toolgate_tasks.alice.t1",
	} {
		st, err := ajs.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		if m, err := st.GetLastMsgForSubject(ctx, subject); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Errorf("%s holds a forged %s: %v %v", stream, subject, m, err)
		}
	}
}

// TestAllowedOperationsWork runs what each role needs, with a real
// server, and checks each effect: an agent calls and reads its own
// results, a worker answers and stores results, an approver reads parked
// calls and publishes a decision, an admin pushes policy and follows
// events, a tool service answers discovery and the calls to its tool.
func TestAllowedOperationsWork(t *testing.T) {
	s := testenv.StartAuthNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wnc, wjs := s.ConnectAs(t, identity.RoleWorker, "worker")
	if err := bus.Provision(ctx, wjs, bus.Config{}); err != nil {
		t.Fatalf("worker provisions: %v", err)
	}
	if _, err := wnc.QueueSubscribe("toolgate.api.tools", "workers", func(m *nats.Msg) { _ = m.Respond([]byte("[]")) }); err != nil {
		t.Fatal(err)
	}
	// The intake, as a worker runs it (worker/intake.go): an agent's call
	// arrives on toolgate.intake.<subject> and is stored under <subject>.
	if _, err := wnc.QueueSubscribe(identity.IntakePrefix+">", "intake", func(m *nats.Msg) {
		out := &nats.Msg{Subject: strings.TrimPrefix(m.Subject, identity.IntakePrefix), Header: m.Header, Data: m.Data}
		if ack, err := wnc.RequestMsg(out, 10*time.Second); err == nil {
			_ = m.Respond(ack.Data)
		}
	}); err != nil {
		t.Fatal(err)
	}
	_ = wnc.Flush()
	anc, ajs := s.ConnectAs(t, identity.RoleAgent, "alice")
	admin, adminJS := s.ConnectAs(t, identity.RoleAdmin, "admin")
	results, err := anc.SubscribeSync("toolgate.result.alice.>")
	if err != nil {
		t.Fatal(err)
	}
	traffic, err := admin.SubscribeSync("toolgate.>")
	if err != nil {
		t.Fatal(err)
	}
	_ = anc.Flush()
	_ = admin.Flush()

	// Agent: list the tools (the worker answers its inbox), publish a call.
	if m, err := anc.Request("toolgate.api.tools", nil, 10*time.Second); err != nil || string(m.Data) != "[]" {
		t.Fatalf("agent lists tools: %v", err)
	}
	if _, err := ajs.Publish(ctx, "toolgate.call.alice.read", []byte(`{}`)); err != nil {
		t.Fatalf("agent publishes its call: %v", err)
	}
	// Worker: takes it from the shared consumer, acks, stores a result.
	cons, err := wjs.Consumer(ctx, bus.StreamCalls, bus.ConsumerWorkers)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if m.Subject() != "toolgate.call.alice.read" {
			t.Fatalf("worker got %s", m.Subject())
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("worker acks: %v", err)
		}
	}
	if _, err := wjs.Publish(ctx, "toolgate.result.alice.c1", []byte("result-1")); err != nil {
		t.Fatalf("worker publishes a result: %v", err)
	}
	if m, err := results.NextMsg(10 * time.Second); err != nil || string(m.Data) != "result-1" {
		t.Fatalf("agent hears its result: %v", err)
	}
	// Agent: its stored result, through the service workers answer (no
	// JetStream API); the answer reaches its inbox only.
	if _, err := wnc.QueueSubscribe(events.SubjectResultAPI, "workers", func(m *nats.Msg) {
		_ = bus.Respond(m, &nats.Msg{Data: []byte("result-of-" + m.Subject)})
	}); err != nil {
		t.Fatal(err)
	}
	_ = wnc.Flush()
	m, err := anc.Request("toolgate.api.result.alice.c1", nil, 10*time.Second)
	if err != nil || string(m.Data) != "result-of-toolgate.api.result.alice.c1" {
		t.Fatalf("agent asks for its stored result: %v %v", m, err)
	}

	// Approver: reads a parked call, watches the bucket, consumes requests,
	// publishes a decision.
	kvw, err := wjs.KeyValue(ctx, bus.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kvw.Put(ctx, "call.c2", []byte(`{"parked":true}`)); err != nil {
		t.Fatalf("worker parks a call: %v", err)
	}
	if _, err := wjs.Publish(ctx, "toolgate.approval.request.c2", []byte("req")); err != nil {
		t.Fatalf("worker asks for approval: %v", err)
	}
	pnc, pjs := s.ConnectAs(t, identity.RoleApprover, "alice")
	kv, err := pjs.KeyValue(ctx, bus.BucketApprovals)
	if err != nil {
		t.Fatalf("approver opens the approvals bucket: %v", err)
	}
	if e, err := kv.Get(ctx, "call.c2"); err != nil || string(e.Value()) != `{"parked":true}` {
		t.Fatalf("approver reads a parked call: %v", err)
	}
	w, err := kv.Watch(ctx, "call.>")
	if err != nil {
		t.Fatalf("approver watches: %v", err)
	}
	if e := testenv.Recv(t, w.Updates(), "w.Updates()"); e == nil || e.Key() != "call.c2" {
		t.Fatalf("approver watch: %v", e)
	}
	_ = w.Stop()
	pc, err := pjs.CreateOrUpdateConsumer(ctx, bus.StreamApprovals, approver.RequestsConsumer())
	if err != nil {
		t.Fatalf("approver's requests consumer: %v", err)
	}
	rb, err := pc.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range rb.Messages() {
		if err := m.Ack(); err != nil {
			t.Fatalf("approver acks: %v", err)
		}
	}
	if err := pnc.Publish("toolgate.approval.decision.c2", []byte("decision")); err != nil {
		t.Fatal(err)
	}
	if err := pnc.Flush(); err != nil || pnc.LastError() != nil {
		t.Fatalf("approver publishes a decision: %v %v", err, pnc.LastError())
	}
	// Admin: pushes policy, sees the bus's traffic (here the decision).
	pkv, err := adminJS.KeyValue(ctx, bus.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pkv.Put(ctx, "policy", []byte("default: allow")); err != nil {
		t.Fatalf("admin pushes policy: %v", err)
	}
	for {
		m, err := traffic.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("admin never saw the decision: %v", err)
		}
		if m.Subject == "toolgate.approval.decision.c2" {
			break
		}
	}
	// Tool: serves its remote tool; the worker discovers it and calls it.
	tnc, _ := s.ConnectAs(t, identity.RoleTool, "stamp")
	svc, err := remote.Serve(tnc, remote.Tool{Name: "stamp", Description: "Stamp a text."},
		func(context.Context, *remote.Request) (*remote.Result, error) {
			return &remote.Result{Content: "stamped"}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	_ = tnc.Flush()
	if m, err := wnc.Request("$SRV.INFO.toolgate-stamp", nil, 10*time.Second); err != nil || !strings.Contains(string(m.Data), "toolgate.remote.stamp") {
		t.Fatalf("worker discovers the tool: %v %v", m, err)
	}
	if m, err := wnc.Request("toolgate.remote.stamp", []byte(`{}`), 10*time.Second); err != nil || !strings.Contains(string(m.Data), "stamped") {
		t.Fatalf("worker calls the tool: %v %v", m, err)
	}
	// Hook: answers the requests to its hook; the worker asks it.
	hnc, _ := s.ConnectAs(t, identity.RoleHook, "stamp")
	if _, err := hnc.Subscribe("toolgate.hook.stamp", func(m *nats.Msg) { _ = m.Respond([]byte(`{"action":"pass"}`)) }); err != nil {
		t.Fatal(err)
	}
	if err := hnc.Flush(); err != nil || hnc.LastError() != nil {
		t.Fatalf("hook subscribes: %v %v", err, hnc.LastError())
	}
	if m, err := wnc.Request("toolgate.hook.stamp", []byte(`{"stage":"before"}`), 10*time.Second); err != nil || string(m.Data) != `{"action":"pass"}` {
		t.Fatalf("worker asks the hook: %v %v", m, err)
	}
	for _, nc := range []*nats.Conn{wnc, anc, admin, pnc, tnc} {
		if err := nc.LastError(); err != nil {
			t.Errorf("%v", err)
		}
	}
}

// TestCrossingsJoinTheAccounts: between the toolgate account and the
// agents account crosses exactly what identity.Crossings lists, each
// way, even for users without permission limits; the agents account has
// no JetStream.
func TestCrossingsJoinTheAccounts(t *testing.T) {
	s := testenv.StartAuthNATS(t)
	_, wjs := s.ConnectAs(t, identity.RoleWorker, "worker")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, wjs, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	tg := testenv.ConnectUnlimited(t, s.ClientURL(), s.Install.Account)
	ag := testenv.ConnectUnlimited(t, s.ClientURL(), s.Install.Agents)
	heard := func(nc *nats.Conn) (*nats.Subscription, func() map[string]bool) {
		sub, err := nc.SubscribeSync(">")
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		return sub, func() map[string]bool {
			got := map[string]bool{}
			for {
				m, err := sub.NextMsg(300 * time.Millisecond)
				if err != nil {
					return got
				}
				got[m.Subject] = true
			}
		}
	}
	fill := func(p string) string { return strings.ReplaceAll(strings.ReplaceAll(p, ">", "alice.x"), "*", "alice") }
	var services, arrived, streams []string
	for _, c := range identity.Crossings {
		if c.Service {
			services = append(services, fill(c.Subject))
			arrived = append(arrived, fill(c.Exported())) // renamed on the way
		} else {
			streams = append(streams, fill(c.Subject))
		}
	}
	// Not crossing: what toolgate keeps to itself, and what the agents
	// must not send.
	inner := []string{"toolgate.audit.alice.read", "toolgate.approval.decision.c1", "toolgate.approval.request.c1",
		"toolgate.event.budget.alice", "toolgate.event.policy.alice", "toolgate.task.alice.t1", "toolgate.dlq.alice.x",
		"toolgate.hook.stamp", "toolgate.remote.stamp", "$KV.toolgate_policy.policy", "$KV.toolgate_budgets.x",
		"$JS.API.STREAM.INFO.TOOLGATE_CALLS", "$JS.API.DIRECT.GET.TOOLGATE_RESULTS.toolgate.result.alice.c1",
		"$JS.ACK.TOOLGATE_TASKS.task_alice.1.1.1.1.1", "_INBOX.worker.worker.x", "$SRV.PING"}

	// Toolgate → agents: the stream crossings only.
	sub, got := heard(ag)
	for _, subj := range append(slices.Clone(streams), append(services, inner...)...) {
		if err := tg.Publish(subj, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	_ = tg.Flush()
	g := got()
	_ = sub.Unsubscribe()
	for _, subj := range streams {
		if !g[subj] {
			t.Errorf("stream crossing %s did not reach the agents account", subj)
		}
	}
	for _, subj := range append(slices.Clone(services), inner...) {
		if g[subj] {
			t.Errorf("%s published in the toolgate account reached the agents account", subj)
		}
	}
	// Agents → toolgate: the service crossings only.
	sub, got = heard(tg)
	for _, subj := range append(slices.Clone(services), append(streams, inner...)...) {
		if err := ag.Publish(subj, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	_ = ag.Flush()
	g = got()
	_ = sub.Unsubscribe()
	for _, subj := range arrived {
		if !g[subj] {
			t.Errorf("service crossing %s did not reach the toolgate account", subj)
		}
	}
	for _, subj := range append(slices.Clone(streams), inner...) {
		if g[subj] {
			t.Errorf("%s published in the agents account reached the toolgate account", subj)
		}
	}
	// Reply subjects: an agents-account user without limits sends every
	// service crossing a request whose reply is a subject the toolgate
	// account's streams keep, and a responder there answers every request
	// blindly (no inbox check): the answers stay in the agents account.
	// The calls stream answers the call itself.
	targets := []string{"toolgate.result.bob.c1", "toolgate.cancel.bob.c1", "toolgate.audit.bob.bash",
		"toolgate.call.bob.bash", "$KV.toolgate_policy.policy", "$KV.toolgate_budgets.x", "toolgate.approval.decision.c1",
		"$KV.toolgate_approvals.call.c1", "toolgate.task.bob.t1", "toolgate.task_result.bob.t1", "$JS.API.STREAM.DELETE.TOOLGATE_CALLS"}
	blind, err := tg.Subscribe(">", func(m *nats.Msg) {
		if m.Reply != "" {
			_ = m.Respond([]byte("answer"))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = tg.Flush()
	sub, got = heard(tg)
	for _, req := range services {
		for _, target := range targets {
			if err := ag.PublishRequest(req, target, []byte("{}")); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = ag.Flush()
	g = got()
	_ = sub.Unsubscribe()
	_ = blind.Unsubscribe()
	for _, target := range targets {
		if g[target] {
			t.Errorf("an answer to an agent's request was published on %s in the toolgate account", target)
		}
	}
	if _, err := wjs.Stream(ctx, bus.StreamCalls); err != nil {
		t.Fatalf("the calls stream: %v", err)
	}

	// The agents account has no JetStream of its own.
	m, err := ag.Request("$JS.API.INFO", nil, 5*time.Second)
	if err == nil && !strings.Contains(string(m.Data), "not enabled") {
		t.Fatalf("JetStream in the agents account: %s", m.Data)
	}
	// A request crossing gets its answer in the requester's inbox, by way
	// of the reply the server gives it in the toolgate account.
	rs, err := tg.Subscribe("toolgate.api.tools", func(m *nats.Msg) {
		if !strings.HasPrefix(m.Reply, identity.ServiceReplyPrefix) {
			t.Errorf("a crossing request's reply is %q", m.Reply)
		}
		_ = bus.Respond(m, &nats.Msg{Data: []byte("listing")})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Unsubscribe()
	_ = tg.Flush()
	anc, _ := s.ConnectAs(t, identity.RoleAgent, "alice")
	if m, err := anc.Request("toolgate.api.tools", nil, 5*time.Second); err != nil || string(m.Data) != "listing" ||
		!strings.HasPrefix(m.Subject, "_INBOX_alice.") {
		t.Fatalf("the agent's request: %v %v", m, err)
	}
}
