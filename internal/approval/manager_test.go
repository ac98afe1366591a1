package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
)

// env is a real embedded NATS server with the bus provisioned, an approver
// key, and helpers to park, decide and watch what the managers resume.
type env struct {
	t   *testing.T
	srv *testenv.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	kp  nkeys.KeyPair
	pub string

	mu       sync.Mutex
	resumed  map[string][]Outcome // call id → every resume call
	refusals chan refusal
	fail     atomic.Int32 // resumes to fail before succeeding
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, resumed: map[string][]Outcome{}, refusals: make(chan refusal, 100)}
	e.srv = testenv.StartNATS(t, "")
	e.connect()
	e.kp, _ = nkeys.CreateUser()
	e.pub, _ = e.kp.PublicKey()
	return e
}

func (e *env) connect() {
	e.t.Helper()
	e.nc, e.js = e.srv.Connect(e.t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, e.js, bus.Config{}); err != nil {
		e.t.Fatal(err)
	}
	sub, err := e.nc.Subscribe(events.Prefix+".approval.refused.>", func(m *nats.Msg) {
		var r refusal
		_ = json.Unmarshal(m.Data, &r)
		e.refusals <- r
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelError}))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// manager starts a Manager running until the test ends.
func (e *env) manager(name string, trusted ...string) *Manager {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m, err := NewManager(ctx, e.js, Options{Name: name, TrustedKeys: trusted, SweepInterval: 20 * time.Millisecond,
		RescanInterval: 200 * time.Millisecond, ClaimLease: 3 * time.Second, Logger: quietLogger()})
	if err != nil {
		e.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx, e.resume) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("Run: %v", err)
		}
	})
	return m
}

func (e *env) resume(_ context.Context, p *Parked, o Outcome) error {
	if e.fail.Load() > 0 {
		e.fail.Add(-1)
		return errors.New("result stream unavailable")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.resumed[p.CallID] = append(e.resumed[p.CallID], o)
	return nil
}

func (e *env) resumes(id string) []Outcome {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.resumed[id])
}

// waitResumed waits until id was resumed and returns its outcome.
func (e *env) waitResumed(id string) Outcome {
	e.t.Helper()
	e.eventually(fmt.Sprintf("call %s resumed", id), func() bool { return len(e.resumes(id)) > 0 })
	return e.resumes(id)[0]
}

func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("gave up waiting for: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *env) park(m *Manager, id string, d policy.Decision) *Parked {
	e.t.Helper()
	p := &Parked{CallID: id, Agent: "agent-7", SessionID: "s1", Tool: "bash",
		Arguments: json.RawMessage(`{"command":"git push origin main"}`), Decision: d}
	if err := m.Park(context.Background(), p); err != nil {
		e.t.Fatalf("Park: %v", err)
	}
	return p
}

func (e *env) decision(p *Parked, approver string, outcome approval.Outcome) *approval.Decision {
	d := &approval.Decision{CallID: p.CallID, ArgsSHA256: p.ArgsSHA256, Outcome: outcome, Approver: approver}
	if outcome == approval.Reject {
		d.Reason = "not on a Friday"
	}
	return d
}

// publish signs d with kp (unless nil) and publishes it like an approver.
func (e *env) publish(d *approval.Decision, kp nkeys.KeyPair) {
	e.t.Helper()
	if kp != nil {
		if err := d.Sign(kp); err != nil {
			e.t.Fatal(err)
		}
	}
	data, _ := json.Marshal(d)
	msg := ceMsg(events.ApprovalDecisionSubject(d.CallID), fmt.Sprintf("decision-%s-%d", d.CallID, time.Now().UnixNano()),
		"toolgate://approver/test", events.TypeApprovalDecided, data)
	if _, err := e.js.PublishMsg(context.Background(), msg); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) refusal(callID string) refusal {
	e.t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case r := <-e.refusals:
			if r.CallID == callID {
				return r
			}
		case <-timeout:
			e.t.Fatalf("no refusal for %s", callID)
		}
	}
}

func (e *env) status(m *Manager, id string) *Parked {
	e.t.Helper()
	p, err := m.Get(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// settle waits until every decision published so far was handled.
func (e *env) settle() {
	e.t.Helper()
	e.eventually("decisions consumer drained", func() bool {
		ci, err := e.js.Consumer(context.Background(), bus.StreamApprovals, bus.ConsumerApprovalDecisions)
		if err != nil {
			return false
		}
		info, err := ci.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

var ask = policy.Decision{Action: policy.Ask, Rule: "tools.bash.ask", Reason: "git writes need a person"}

func TestApproveResumesExactlyOnceAcrossWorkers(t *testing.T) {
	e := newEnv(t)
	m1 := e.manager("w1", e.pub)
	e.manager("w2", e.pub)
	p := e.park(m1, "call-1", ask)

	// Parking published the request, once, even when parked twice.
	if err := m1.Park(context.Background(), &Parked{CallID: "call-1", Agent: p.Agent, Tool: p.Tool, Arguments: p.Arguments, Decision: ask}); err != nil {
		t.Fatalf("second Park: %v", err)
	}
	st, _ := e.js.Stream(context.Background(), bus.StreamApprovals)
	info, _ := st.Info(context.Background(), jetstream.WithSubjectFilter(events.ApprovalRequestSubject("call-1")))
	if n := info.State.Msgs; n != 1 {
		t.Fatalf("%d approval requests stored, want 1", n)
	}
	pending, err := m1.Pending(context.Background())
	if err != nil || len(pending) != 1 || pending[0].CallID != "call-1" {
		t.Fatalf("Pending = %v, %v", pending, err)
	}

	d := e.decision(p, "alice", approval.Approve)
	d.Comment = "ship it"
	e.publish(d, e.kp)
	dup := *d
	e.publish(&dup, nil) // the same signed decision again
	e.publish(e.decision(p, "bob", approval.Reject), e.kp)

	o := e.waitResumed("call-1")
	e.settle()
	if o.Status != approval.Approved || !slices.Equal(o.Approvers, []string{"alice"}) || o.Comment != "alice: ship it" {
		t.Fatalf("outcome = %+v", o)
	}
	e.eventually("record marked resumed", func() bool { return e.status(m1, "call-1").Resumed })
	if n := len(e.resumes("call-1")); n != 1 {
		t.Fatalf("resumed %d times, want 1", n)
	}
	if r := e.refusal("call-1"); !errors.Is(errorsFor(r.Reason), ErrAlreadyDecided) {
		t.Fatalf("later decision refusal = %q, want already decided", r.Reason)
	}
	if pending, _ := m1.Pending(context.Background()); len(pending) != 0 {
		t.Fatalf("still pending: %v", pending)
	}
}

// errorsFor maps a refusal's reason text back to the sentinel it names, so
// tests can use errors.Is on what crossed the wire.
func errorsFor(reason string) error {
	for _, e := range []error{ErrAlreadyDecided, ErrHashMismatch, ErrSelfApproval, ErrDuplicateApprover,
		ErrLate, ErrWrongOutcome, approval.ErrUntrustedKey, approval.ErrBadSignature, approval.ErrInvalidDecision,
		approval.ErrInvalidAmendment, ErrNotFound} {
		if strings.Contains(reason, e.Error()) {
			return e
		}
	}
	return errors.New(reason)
}

func TestThresholdOfTwoDistinctApprovers(t *testing.T) {
	e := newEnv(t)
	m := e.manager("w1", e.pub)
	d := ask
	d.Approvers = 2
	p := e.park(m, "call-2", d)

	e.publish(e.decision(p, "alice", approval.Approve), e.kp)
	e.publish(e.decision(p, "alice", approval.Approve), e.kp) // the same person twice
	if r := e.refusal("call-2"); !errors.Is(errorsFor(r.Reason), ErrDuplicateApprover) {
		t.Fatalf("refusal = %q", r.Reason)
	}
	e.settle()
	if got := e.status(m, "call-2"); got.Status != approval.Pending || len(got.Approvals) != 1 {
		t.Fatalf("after one approver: status %s with %d approvals", got.Status, len(got.Approvals))
	}
	if n := len(e.resumes("call-2")); n != 0 {
		t.Fatalf("resumed after one of two approvals")
	}
	e.publish(e.decision(p, "bob", approval.Approve), e.kp)
	o := e.waitResumed("call-2")
	if o.Status != approval.Approved || !slices.Equal(o.Approvers, []string{"alice", "bob"}) {
		t.Fatalf("outcome = %+v", o)
	}
}

func TestRefusedDecisions(t *testing.T) {
	e := newEnv(t)
	m := e.manager("w1", e.pub)
	stranger, _ := nkeys.CreateUser()
	tests := []struct {
		name   string
		make   func(p *Parked) (*approval.Decision, nkeys.KeyPair)
		reason error
	}{
		{"self-approval", func(p *Parked) (*approval.Decision, nkeys.KeyPair) {
			return e.decision(p, p.Agent, approval.Approve), e.kp
		}, ErrSelfApproval},
		{"tampered hash", func(p *Parked) (*approval.Decision, nkeys.KeyPair) {
			d := e.decision(p, "alice", approval.Approve)
			d.ArgsSHA256 = approval.ArgsHash(p.Agent, p.Tool, json.RawMessage(`{"command":"git push --force"}`))
			return d, e.kp
		}, ErrHashMismatch},
		{"untrusted key", func(p *Parked) (*approval.Decision, nkeys.KeyPair) {
			return e.decision(p, "alice", approval.Approve), stranger
		}, approval.ErrUntrustedKey},
		{"altered after signing", func(p *Parked) (*approval.Decision, nkeys.KeyPair) {
			d := e.decision(p, "alice", approval.Reject)
			_ = d.Sign(e.kp)
			d.Outcome, d.Reason = approval.Approve, ""
			return d, nil
		}, approval.ErrBadSignature},
		{"reject without a reason", func(p *Parked) (*approval.Decision, nkeys.KeyPair) {
			d := e.decision(p, "alice", approval.Reject)
			d.Reason = ""
			return d, e.kp
		}, approval.ErrInvalidDecision},
		{"answer to an approval", func(p *Parked) (*approval.Decision, nkeys.KeyPair) {
			d := e.decision(p, "alice", approval.Answer)
			d.Answer = "yes"
			return d, e.kp
		}, ErrWrongOutcome},
		{"amendment wider than the call", func(p *Parked) (*approval.Decision, nkeys.KeyPair) {
			d := e.decision(p, "alice", approval.Approve)
			d.AlwaysAllow = &approval.Amendment{ID: "wide", Agent: p.Agent, Tool: "bash", CommandPrefix: "rm"}
			return d, e.kp
		}, approval.ErrInvalidAmendment},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := e.park(m, fmt.Sprintf("refused-%d", i), ask)
			d, kp := tt.make(p)
			e.publish(d, kp)
			r := e.refusal(p.CallID)
			if !errors.Is(errorsFor(r.Reason), tt.reason) {
				t.Fatalf("refusal reason %q, want %v", r.Reason, tt.reason)
			}
			e.settle()
			if got := e.status(m, p.CallID); got.Status != approval.Pending || len(got.Approvals) != 0 {
				t.Fatalf("status %s with %d approvals after a refused decision", got.Status, len(got.Approvals))
			}
			if n := len(e.resumes(p.CallID)); n != 0 {
				t.Fatalf("refused decision resumed the call")
			}
		})
	}
	t.Run("unknown call", func(t *testing.T) {
		d := &approval.Decision{CallID: "nope", ArgsSHA256: approval.ArgsHash("a", "b", nil), Outcome: approval.Approve, Approver: "alice"}
		e.publish(d, e.kp)
		if r := e.refusal("nope"); !errors.Is(errorsFor(r.Reason), ErrNotFound) {
			t.Fatalf("refusal = %q", r.Reason)
		}
	})
	t.Run("reject by the agent itself is accepted", func(t *testing.T) {
		p := e.park(m, "self-reject", ask)
		e.publish(e.decision(p, p.Agent, approval.Reject), e.kp)
		if o := e.waitResumed(p.CallID); o.Status != approval.Rejected || o.Reason != "not on a Friday" {
			t.Fatalf("outcome = %+v", o)
		}
	})
}

func TestExpiryResumesOnceAcrossWorkers(t *testing.T) {
	e := newEnv(t)
	m1 := e.manager("w1", e.pub)
	e.manager("w2", e.pub)
	e.manager("w3", e.pub)
	d := ask
	d.ApprovalTimeout = 200 * time.Millisecond
	d.Approvers = 2
	p := e.park(m1, "call-exp", d)
	if got := p.ExpiresAt.Sub(p.ParkedAt); got != 200*time.Millisecond {
		t.Fatalf("expiry %s after parking, want the rule's 200ms", got)
	}
	e.publish(e.decision(p, "alice", approval.Approve), e.kp)
	o := e.waitResumed("call-exp")
	if o.Status != approval.Expired || !slices.Equal(o.Approvers, []string{"alice"}) {
		t.Fatalf("outcome = %+v", o)
	}
	e.eventually("record marked resumed", func() bool { return e.status(m1, "call-exp").Resumed })
	// A decision after the expiry changes nothing.
	e.publish(e.decision(p, "bob", approval.Approve), e.kp)
	if r := e.refusal("call-exp"); !errors.Is(errorsFor(r.Reason), ErrAlreadyDecided) {
		t.Fatalf("late decision refusal = %q", r.Reason)
	}
	e.settle()
	if n := len(e.resumes("call-exp")); n != 1 {
		t.Fatalf("resumed %d times, want 1", n)
	}
	// Default timeout applies when the rule sets none.
	q := e.park(m1, "call-default", ask)
	if got := q.ExpiresAt.Sub(q.ParkedAt); got != approval.DefaultTimeout {
		t.Fatalf("default expiry %s, want %s", got, approval.DefaultTimeout)
	}
}

func TestResumeFailureIsRetriedUntilItSucceeds(t *testing.T) {
	e := newEnv(t)
	m := e.manager("w1", e.pub)
	e.fail.Store(2)
	p := e.park(m, "call-retry", ask)
	e.publish(e.decision(p, "alice", approval.Approve), e.kp)
	e.waitResumed("call-retry")
	got := e.status(m, "call-retry")
	e.eventually("resumed flag", func() bool { got = e.status(m, "call-retry"); return got.Resumed })
	if got.ResumeAttempts != 2 {
		t.Fatalf("resume attempts recorded %d, want 2", got.ResumeAttempts)
	}
	if n := len(e.resumes("call-retry")); n != 1 {
		t.Fatalf("succeeded %d times, want 1", n)
	}
}

func TestClarifyAnswerAndDefault(t *testing.T) {
	e := newEnv(t)
	m := e.manager("w1", e.pub)
	clarify := policy.Decision{Action: policy.Ask, Rule: approval.ClarifyRule, Reason: "Which branch?"}
	def := "main"
	park := func(id string, q *approval.Question) *Parked {
		p := &Parked{CallID: id, Agent: "agent-7", Tool: approval.ClarifyName,
			Arguments: json.RawMessage(`{"question":"Which branch?"}`), Decision: clarify, Question: q}
		if err := m.Park(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		return p
	}

	p := park("q-1", &approval.Question{Text: "Which branch?", Choices: []string{"main", "dev"}})
	bad := e.decision(p, "alice", approval.Answer)
	bad.Answer = "prod"
	e.publish(bad, e.kp)
	if r := e.refusal("q-1"); !errors.Is(errorsFor(r.Reason), ErrWrongOutcome) {
		t.Fatalf("answer outside the choices: refusal %q", r.Reason)
	}
	e.publish(e.decision(p, "alice", approval.Approve), e.kp)
	if r := e.refusal("q-1"); !errors.Is(errorsFor(r.Reason), ErrWrongOutcome) {
		t.Fatalf("approve on a question: refusal %q", r.Reason)
	}
	good := e.decision(p, "alice", approval.Answer)
	good.Answer = "dev"
	e.publish(good, e.kp)
	if o := e.waitResumed("q-1"); o.Status != approval.Answered || o.Answer != "dev" || o.DefaultAnswer {
		t.Fatalf("outcome = %+v", o)
	}

	park("q-2", &approval.Question{Text: "Which branch?", Timeout: 100 * time.Millisecond, DefaultAnswer: &def})
	if o := e.waitResumed("q-2"); o.Status != approval.Answered || o.Answer != "main" || !o.DefaultAnswer {
		t.Fatalf("default outcome = %+v", o)
	}
	park("q-3", &approval.Question{Text: "Which branch?", Timeout: 100 * time.Millisecond})
	if o := e.waitResumed("q-3"); o.Status != approval.Expired {
		t.Fatalf("no-default outcome = %+v", o)
	}
}

func TestParkedCallSurvivesRestarts(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	m1, err := NewManager(ctx, e.js, Options{Name: "before", TrustedKeys: []string{e.pub}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m1.Run(ctx, e.resume) }()
	p := e.park(m1, "call-restart", ask)
	cancel() // the worker stops
	<-done

	e.srv = testenv.RestartNATS(t, e.srv) // the server restarts
	e.connect()
	m2 := e.manager("after", e.pub) // a new worker
	pending, err := m2.Pending(context.Background())
	if err != nil || len(pending) != 1 || pending[0].CallID != "call-restart" {
		t.Fatalf("after restart Pending = %v, %v", pending, err)
	}
	e.publish(e.decision(p, "alice", approval.Approve), e.kp)
	if o := e.waitResumed("call-restart"); o.Status != approval.Approved {
		t.Fatalf("outcome = %+v", o)
	}

	// The server restarts under a running worker while a call is parked.
	q := e.park(m2, "call-restart-2", ask)
	e.srv = testenv.RestartNATS(t, e.srv)
	e.eventually("reconnected", func() bool { return e.nc.IsConnected() })
	var perr error
	e.eventually("decision published after restart", func() bool {
		d := e.decision(q, "bob", approval.Approve)
		_ = d.Sign(e.kp)
		data, _ := json.Marshal(d)
		_, perr = e.js.PublishMsg(context.Background(), ceMsg(events.ApprovalDecisionSubject(q.CallID), "d-restart-2",
			"toolgate://approver/test", events.TypeApprovalDecided, data))
		return perr == nil
	})
	if o := e.waitResumed("call-restart-2"); o.Status != approval.Approved || len(e.resumes("call-restart-2")) != 1 {
		t.Fatalf("outcome = %+v", o)
	}
	// The sweep still sees calls parked after the restart and expires them.
	d := ask
	d.ApprovalTimeout = 100 * time.Millisecond
	e.park(m2, "call-restart-3", d)
	if o := e.waitResumed("call-restart-3"); o.Status != approval.Expired {
		t.Fatalf("expiry after restart = %+v", o)
	}
}

func TestConfiguredKeysReplaceRegisteredOnes(t *testing.T) {
	e := newEnv(t)
	other, _ := nkeys.CreateUser()
	otherPub, _ := other.PublicKey()
	m := e.manager("w1", otherPub) // trusts only otherPub
	kv, _ := e.js.KeyValue(context.Background(), bus.BucketApprovals)
	if err := RegisterApproverKey(context.Background(), kv, approval.ApproverKey{PublicKey: e.pub, Name: "registered"}); err != nil {
		t.Fatal(err)
	}
	p := e.park(m, "call-pinned", ask)
	e.publish(e.decision(p, "alice", approval.Approve), e.kp)
	if r := e.refusal("call-pinned"); !errors.Is(errorsFor(r.Reason), approval.ErrUntrustedKey) {
		t.Fatalf("registered but not configured key: refusal %q", r.Reason)
	}
	e.publish(e.decision(p, "alice", approval.Approve), other)
	if o := e.waitResumed("call-pinned"); o.Status != approval.Approved {
		t.Fatalf("outcome = %+v", o)
	}
}

func TestZeroConfigTrustsRegisteredKeys(t *testing.T) {
	e := newEnv(t)
	m := e.manager("w1") // no trusted keys configured
	p := e.park(m, "call-zc", ask)
	e.publish(e.decision(p, "alice", approval.Approve), e.kp)
	if r := e.refusal("call-zc"); !errors.Is(errorsFor(r.Reason), approval.ErrUntrustedKey) {
		t.Fatalf("unregistered key: refusal %q", r.Reason)
	}
	kv, _ := e.js.KeyValue(context.Background(), bus.BucketApprovals)
	if err := RegisterApproverKey(context.Background(), kv, approval.ApproverKey{PublicKey: e.pub, Name: "approver-1"}); err != nil {
		t.Fatal(err)
	}
	e.publish(e.decision(p, "alice", approval.Approve), e.kp)
	if o := e.waitResumed("call-zc"); o.Status != approval.Approved {
		t.Fatalf("outcome = %+v", o)
	}
	if err := RegisterApproverKey(context.Background(), kv, approval.ApproverKey{PublicKey: "not-a-key"}); err == nil {
		t.Fatal("registered a malformed key")
	}
}

func TestAlwaysAllowStoresAmendmentWatchedAndRevocable(t *testing.T) {
	e := newEnv(t)
	m := e.manager("w1", e.pub)
	policyKV, _ := e.js.KeyValue(context.Background(), bus.BucketPolicy)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var seen [][]approval.Amendment
	go func() {
		_ = WatchAmendments(ctx, policyKV, quietLogger(), func(as []approval.Amendment) {
			mu.Lock()
			seen = append(seen, as)
			mu.Unlock()
		})
	}()
	last := func() []approval.Amendment {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 {
			return nil
		}
		return seen[len(seen)-1]
	}
	e.eventually("initial amendments delivered", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 1 })

	p := e.park(m, "call-aa", ask)
	d := e.decision(p, "alice", approval.Approve)
	d.AlwaysAllow = &approval.Amendment{ID: "am-1", Agent: p.Agent, Tool: p.Tool, CommandPrefix: "git push"}
	e.publish(d, e.kp)
	o := e.waitResumed("call-aa")
	if len(o.Amendments) != 1 || o.Amendments[0].ID != "am-1" {
		t.Fatalf("outcome amendments = %+v", o.Amendments)
	}
	e.eventually("watch sees the amendment", func() bool { l := last(); return len(l) == 1 && l[0].ID == "am-1" })
	// The gate's form, and the gate applying it: the amended call is allowed
	// for this agent only.
	doc, _, err := policy.Parse([]byte("tools:\n  default: ask\n  run_shell:\n    action: ask\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	gate := policy.NewGate(doc)
	gate.SetAmendments(PolicyAmendments(last()))
	req := policy.Request{Agent: "agent-7", Tool: "bash", Known: true, Kind: policy.KindExecute,
		Arguments: map[string]any{"command": "git push origin main"}, Workspace: t.TempDir()}
	if d := gate.Evaluate(context.Background(), req); d.Action != policy.Allow {
		t.Fatalf("amended call: %+v", d)
	}
	req.Agent = "agent-8"
	if d := gate.Evaluate(context.Background(), req); d.Action == policy.Allow {
		t.Fatalf("another agent got the amendment: %+v", d)
	}
	list, err := ListAmendments(context.Background(), policyKV)
	if err != nil || len(list) != 1 {
		t.Fatalf("ListAmendments = %v, %v", list, err)
	}
	a := list[0]
	if a.Agent != "agent-7" || a.Tool != "bash" || a.CommandPrefix != "git push" || a.CallID != "call-aa" || !slices.Equal(a.CreatedBy, []string{"alice"}) {
		t.Fatalf("stored amendment = %+v", a)
	}
	if err := RevokeAmendment(context.Background(), policyKV, "am-1"); err != nil {
		t.Fatal(err)
	}
	e.eventually("watch sees the revocation", func() bool { return len(last()) == 0 && len(seen) >= 3 })
	if err := RevokeAmendment(context.Background(), policyKV, "am-1"); !errors.Is(err, ErrNoAmendment) {
		t.Fatalf("revoking twice = %v, want ErrNoAmendment", err)
	}
}

func TestAmendmentRevokedAcrossServerRestartIsApplied(t *testing.T) {
	amendmentsResync = 100 * time.Millisecond
	defer func() { amendmentsResync = 10 * time.Second }()
	e := newEnv(t)
	policyKV, _ := e.js.KeyValue(context.Background(), bus.BucketPolicy)
	a := approval.Amendment{ID: "am-r", Agent: "bot", Tool: "bash", CommandPrefix: "make", CreatedAt: time.Now().UTC()}
	val, _ := json.Marshal(a)
	if _, err := policyKV.Put(context.Background(), approval.AmendmentKeyPrefix+a.ID, val); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var last []approval.Amendment
	go func() {
		_ = WatchAmendments(ctx, policyKV, quietLogger(), func(as []approval.Amendment) {
			mu.Lock()
			last = as
			mu.Unlock()
		})
	}()
	e.eventually("amendment loaded", func() bool { mu.Lock(); defer mu.Unlock(); return len(last) == 1 })
	e.srv = testenv.RestartNATS(t, e.srv)
	e.eventually("reconnected", func() bool { return e.nc.IsConnected() })
	e.eventually("revoked after the restart", func() bool {
		return RevokeAmendment(context.Background(), policyKV, "am-r") == nil
	})
	e.eventually("revocation applied", func() bool { mu.Lock(); defer mu.Unlock(); return len(last) == 0 })
}

func TestParkRefusesBadInput(t *testing.T) {
	e := newEnv(t)
	m := e.manager("w1", e.pub)
	tests := []struct {
		name string
		p    Parked
		want error
	}{
		{"call id with a dot", Parked{CallID: "a.b", Agent: "x", Tool: "bash"}, ErrInvalidParked},
		{"no agent", Parked{CallID: "c", Tool: "bash"}, ErrInvalidParked},
		{"no tool", Parked{CallID: "c", Agent: "x"}, ErrInvalidParked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := m.Park(context.Background(), &tt.p); !errors.Is(err, tt.want) {
				t.Fatalf("Park = %v, want %v", err, tt.want)
			}
		})
	}
	e.park(m, "taken", ask)
	other := &Parked{CallID: "taken", Agent: "agent-7", Tool: "bash", Arguments: json.RawMessage(`{"command":"rm -rf /"}`), Decision: ask}
	if err := m.Park(context.Background(), other); !errors.Is(err, ErrConflict) {
		t.Fatalf("parking other arguments under a taken id = %v, want ErrConflict", err)
	}
	if CallKey("ok-id_1") != "call.ok-id_1" || CallKey("a:b@c") == "call.a:b@c" {
		t.Fatalf("CallKey encodes wrongly: %s %s", CallKey("ok-id_1"), CallKey("a:b@c"))
	}
	p := &Parked{CallID: "a:b@c", Agent: "agent-7", Tool: "bash", Decision: ask}
	if err := m.Park(context.Background(), p); err != nil {
		t.Fatalf("Park with a key-unsafe id: %v", err)
	}
	if got, err := m.Get(context.Background(), "a:b@c"); err != nil || got.CallID != "a:b@c" {
		t.Fatalf("Get = %v, %v", got, err)
	}
}

// ceMsg is a decision event as the approver publishes it.
func ceMsg(subject, id, source, typ string, data []byte) *nats.Msg {
	m, err := events.NewMessage(subject, id, source, typ, json.RawMessage(data))
	if err != nil {
		panic(err)
	}
	return m
}
