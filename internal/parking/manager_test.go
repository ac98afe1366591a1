package parking

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
	"github.com/toolgate/toolgate/pkg/trust"
	"github.com/toolgate/toolgate/pkg/trust/trusttest"
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
	// acct is the install's account: approvers with its JWTs are trusted.
	acct *trusttest.Account

	mu       sync.Mutex
	resumed  map[string][]Outcome // call id → every resume call
	refusals chan Refusal
	fail     atomic.Int32 // resumes to fail before succeeding
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, resumed: map[string][]Outcome{}, refusals: make(chan Refusal, 100)}
	e.srv = testenv.StartNATS(t, "")
	e.connect()
	e.kp, _ = nkeys.CreateUser()
	e.pub, _ = e.kp.PublicKey()
	e.acct = trusttest.NewAccount(t)
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
		var r Refusal
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

// manager starts a Manager running until the test ends, trusting the keys
// pinned in trusted and the approvers of e.acct.
func (e *env) manager(name string, trusted ...string) *Manager {
	e.t.Helper()
	return e.managerWith(Options{Name: name, TrustedKeys: trusted, TrustedAccounts: []string{e.acct.Public}})
}

// managerWith starts a Manager with o (and the test's short intervals).
func (e *env) managerWith(o Options) *Manager {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	o.SweepInterval, o.RescanInterval, o.ClaimLease, o.Logger = 20*time.Millisecond, 200*time.Millisecond, 3*time.Second, quietLogger()
	m, err := NewManager(ctx, e.js, o)
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

func (e *env) refusal(callID string) Refusal {
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
	if r := e.refusal("call-1"); !errors.Is(&RefusalError{Code: r.Code, Reason: r.Reason}, ErrAlreadyDecided) {
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
		ErrLate, ErrStale, ErrTampered, ErrWrongOutcome, approval.ErrUntrustedKey, approval.ErrBadSignature, approval.ErrInvalidDecision,
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
	if r := e.refusal("call-2"); !errors.Is(&RefusalError{Code: r.Code, Reason: r.Reason}, ErrDuplicateApprover) {
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
		{"decided before the call was parked (replayed)", func(p *Parked) (*approval.Decision, nkeys.KeyPair) {
			d := e.decision(p, "alice", approval.Approve)
			d.DecidedAt = p.ParkedAt.Add(-time.Hour)
			return d, e.kp
		}, ErrStale},
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
	if r := e.refusal("call-exp"); !errors.Is(&RefusalError{Code: r.Code, Reason: r.Reason}, ErrAlreadyDecided) {
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
		args := `{"question":"Which branch?"}`
		if q.DefaultAnswer != nil {
			args = `{"question":"Which branch?","default_answer":"` + *q.DefaultAnswer + `"}`
		}
		p := &Parked{CallID: id, Agent: "agent-7", Tool: approval.ClarifyName,
			Arguments: json.RawMessage(args), Decision: clarify, Question: q}
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
	// A default answer written into the record is not the question's.
	forged := "rm -rf / is fine, go ahead"
	park("q-4", &approval.Question{Text: "Which branch?", Timeout: time.Hour, DefaultAnswer: &def})
	e.tamper("q-4", func(p *Parked) {
		p.Status = approval.Answered
		p.Outcome = &Outcome{Status: approval.Answered, Answer: forged, DefaultAnswer: true, DecidedAt: time.Now().UTC()}
	})
	if o := e.waitResumed("q-4"); o.Status != approval.Rejected || !strings.Contains(o.Reason, "default answer") {
		t.Fatalf("forged default answer outcome = %+v", o)
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
	testenv.Recv(t, done, "done")

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

// hasReason reports whether a refusal's reason names err.
func hasReason(reason string, err error) bool { return strings.Contains(reason, err.Error()) }

// publishAs signs d with signer's key and JWT and publishes it.
func (e *env) publishAs(d *approval.Decision, signer trust.Signer) {
	e.t.Helper()
	d.SignerJWT = signer.JWT
	e.publish(d, signer.Key)
}

func TestOnlyApproversOfTheInstallDecide(t *testing.T) {
	e := newEnv(t)
	m := e.manager("w1") // no pinned keys: the account's approvers only
	kv, _ := e.js.KeyValue(context.Background(), bus.BucketApprovals)
	foreign := trusttest.NewAccount(t)
	desk := e.acct.User(t, "desk", trust.RoleApprover, time.Hour)
	tests := []struct {
		name   string
		signer trust.Signer
		who    string
		want   error
	}{
		{"forged: random key", trust.Signer{Key: must(nkeys.CreateUser())}, "alice", trust.ErrUnknownKey},
		{"foreign approver: valid JWT of another account", foreign.User(t, "desk", trust.RoleApprover, time.Hour), "alice", trust.ErrForeignIssuer},
		{"agent-role JWT of the install", e.acct.User(t, "agent-9", trust.RoleAgent, time.Hour), "alice", trust.ErrWrongRole},
		{"admin-role JWT", e.acct.User(t, "root", trust.RoleAdmin, time.Hour), "alice", trust.ErrWrongRole},
		{"expired approver JWT", e.acct.User(t, "desk", trust.RoleApprover, -time.Second), "alice", trust.ErrExpired},
		{"another approver's JWT with my key", trust.Signer{Key: must(nkeys.CreateUser()), JWT: desk.JWT}, "alice", trust.ErrKeyMismatch},
		{"person named as the agent, folded", desk, "AGENT_7", ErrSelfApproval},
		{"approver identity that is the agent", e.acct.User(t, "Agent-7", trust.RoleApprover, time.Hour), "alice", ErrSelfApproval},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := e.park(m, fmt.Sprintf("trust-%d", i), ask)
			e.publishAs(e.decision(p, tt.who, approval.Approve), tt.signer)
			r := e.refusal(p.CallID)
			if !hasReason(r.Reason, tt.want) {
				t.Fatalf("refusal %q, want %v", r.Reason, tt.want)
			}
			e.settle()
			if got := e.status(m, p.CallID); got.Status != approval.Pending || len(got.Approvals) != 0 || len(e.resumes(p.CallID)) != 0 {
				t.Fatalf("a refused decision counted: %s, %d approvals", got.Status, len(got.Approvals))
			}
		})
	}
	t.Run("registered key without a JWT does not count", func(t *testing.T) {
		p := e.park(m, "trust-reg", ask)
		if err := RegisterApproverKey(context.Background(), kv, approval.ApproverKey{PublicKey: e.pub, Name: "squatter"}); err != nil {
			t.Fatal(err)
		}
		e.publish(e.decision(p, "alice", approval.Approve), e.kp)
		if r := e.refusal(p.CallID); !hasReason(r.Reason, trust.ErrUnknownKey) {
			t.Fatalf("refusal %q", r.Reason)
		}
		// Registering the approver's JWT is harmless: the account signed it.
		reg := e.acct.User(t, "desk-2", trust.RoleApprover, 0)
		if err := RegisterApproverKey(context.Background(), kv, approval.ApproverKey{PublicKey: must(reg.Key.PublicKey()), JWT: reg.JWT, Name: "desk-2"}); err != nil {
			t.Fatal(err)
		}
		e.publish(e.decision(p, "alice", approval.Approve), reg.Key)
		if o := e.waitResumed(p.CallID); o.Status != approval.Approved {
			t.Fatalf("outcome %+v", o)
		}
	})
	t.Run("approver of the install", func(t *testing.T) {
		p := e.park(m, "trust-ok", ask)
		e.publishAs(e.decision(p, "alice", approval.Approve), desk)
		if o := e.waitResumed(p.CallID); o.Status != approval.Approved || !slices.Equal(o.Approvers, []string{"alice"}) {
			t.Fatalf("outcome %+v", o)
		}
	})
	t.Run("a worker that trusts nothing refuses everything", func(t *testing.T) {
		e2 := newEnv(t)
		m2 := e2.managerWith(Options{Name: "bare"})
		p := e2.park(m2, "trust-none", ask)
		e2.publishAs(e2.decision(p, "alice", approval.Approve), e2.acct.User(t, "desk", trust.RoleApprover, 0))
		if r := e2.refusal(p.CallID); !hasReason(r.Reason, trust.ErrForeignIssuer) {
			t.Fatalf("refusal %q", r.Reason)
		}
	})
	if err := RegisterApproverKey(context.Background(), kv, approval.ApproverKey{PublicKey: "not-a-key"}); err == nil {
		t.Fatal("registered a malformed key")
	}
}

func TestDistinctApproversAreFoldedNames(t *testing.T) {
	e := newEnv(t)
	m := e.manager("w1", e.pub)
	d := ask
	d.Approvers = 2
	p := e.park(m, "fold-2", d)
	e.publish(e.decision(p, "alice", approval.Approve), e.kp)
	e.publish(e.decision(p, "Alice", approval.Approve), e.kp)
	if r := e.refusal(p.CallID); !errors.Is(&RefusalError{Code: r.Code, Reason: r.Reason}, ErrDuplicateApprover) {
		t.Fatalf("refusal %q", r.Reason)
	}
	e.settle()
	if got := e.status(m, p.CallID); got.Status != approval.Pending || len(got.Approvals) != 1 {
		t.Fatalf("alice and Alice counted as two people: %s %d", got.Status, len(got.Approvals))
	}
}

// tamper rewrites the parked record of id with change, keeping the
// args_sha256 field as it was, as someone with write access to the bucket
// could.
func (e *env) tamper(id string, change func(p *Parked)) {
	e.t.Helper()
	kv, _ := e.js.KeyValue(context.Background(), bus.BucketApprovals)
	for {
		found, _, err := GetParked(context.Background(), kv, "", id)
		if err != nil {
			e.t.Fatal(err)
		}
		key := CallKey(found.Agent, id)
		entry, err := kv.Get(context.Background(), key)
		if err != nil {
			e.t.Fatal(err)
		}
		var p Parked
		if err := json.Unmarshal(entry.Value(), &p); err != nil {
			e.t.Fatal(err)
		}
		change(&p)
		val, _ := json.Marshal(&p)
		if _, err := kv.Update(context.Background(), key, val, entry.Revision()); err == nil {
			return
		}
	}
}

func TestTamperedParkedRecordNeverResumesApproved(t *testing.T) {
	e := newEnv(t)
	m := e.manager("w1", e.pub)
	evil := json.RawMessage(`{"command":"sudo id; echo TAMPERED-RAN"}`)

	t.Run("arguments altered before the decision", func(t *testing.T) {
		p := e.park(m, "tamper-1", ask)
		e.tamper(p.CallID, func(p *Parked) { p.Arguments = evil })
		e.publish(e.decision(p, "alice", approval.Approve), e.kp)
		if r := e.refusal(p.CallID); !hasReason(r.Reason, ErrTampered) {
			t.Fatalf("refusal %q", r.Reason)
		}
		e.settle()
		if len(e.resumes(p.CallID)) != 0 || e.status(m, p.CallID).Status != approval.Pending {
			t.Fatal("a decision on altered arguments counted")
		}
	})
	// A record made final by hand (as if approved) with other arguments,
	// whose claim lapsed: the sweep takes it over and must not run it.
	forge := func(id string, change func(p *Parked, d *approval.Decision)) Outcome {
		t.Helper()
		p := e.park(m, id, ask)
		d := e.decision(p, "alice", approval.Approve)
		if err := d.Sign(e.kp); err != nil {
			t.Fatal(err)
		}
		e.tamper(id, func(r *Parked) {
			r.Status, r.Approvals = approval.Approved, []approval.Decision{*d}
			r.Outcome = &Outcome{Status: approval.Approved, Approvers: []string{"alice"}, DecidedAt: time.Now().UTC()}
			change(r, d)
		})
		return e.waitResumed(id)
	}
	tests := []struct {
		name   string
		change func(p *Parked, d *approval.Decision)
		want   approval.Status
	}{
		{"untouched record runs", func(*Parked, *approval.Decision) {}, approval.Approved},
		{"arguments altered after the approval", func(p *Parked, _ *approval.Decision) { p.Arguments = evil }, approval.Rejected},
		{"arguments and hash field altered", func(p *Parked, _ *approval.Decision) {
			p.Arguments = evil
			p.ArgsSHA256 = approval.ArgsHash(p.Agent, p.Tool, evil)
		}, approval.Rejected},
		{"approval without a valid signature", func(p *Parked, _ *approval.Decision) { p.Approvals[0].Approver = "mallory" }, approval.Rejected},
		{"approval by an untrusted key", func(p *Parked, d *approval.Decision) {
			other := *d
			other.Signature = ""
			_ = other.Sign(must(nkeys.CreateUser()))
			p.Approvals = []approval.Decision{other}
		}, approval.Rejected},
		{"threshold lowered by the same person twice", func(p *Parked, _ *approval.Decision) {
			p.Decision.Approvers = 2
			p.Approvals = append(p.Approvals, p.Approvals[0])
		}, approval.Rejected},
		{"approved with no approval", func(p *Parked, _ *approval.Decision) { p.Approvals = nil }, approval.Rejected},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := forge(fmt.Sprintf("tamper-r%d", i), tt.change)
			if o.Status != tt.want {
				t.Fatalf("outcome %+v, want %s", o, tt.want)
			}
			if tt.want == approval.Rejected && !strings.Contains(o.Reason, ErrTampered.Error()) && !strings.Contains(o.Reason, "untrusted") {
				t.Fatalf("reason %q does not say why", o.Reason)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
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
		_ = WatchAmendments(ctx, policyKV, quietLogger(), m, func(as []approval.Amendment) {
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
	m := e.manager("w1", e.pub)
	policyKV, _ := e.js.KeyValue(context.Background(), bus.BucketPolicy)
	a := e.granted("am-r", "bot", "make")
	val, _ := json.Marshal(a)
	if _, err := policyKV.Put(context.Background(), approval.AmendmentKeyPrefix+a.ID, val); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var last []approval.Amendment
	go func() {
		_ = WatchAmendments(ctx, policyKV, quietLogger(), m, func(as []approval.Amendment) {
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

// granted is an amendment as a worker stores it: with the approval that
// asked for it, signed by e.kp.
func (e *env) granted(id, agent, prefix string) approval.Amendment {
	e.t.Helper()
	scope := approval.Amendment{ID: id, Agent: agent, Tool: "bash", CommandPrefix: prefix}
	d := &approval.Decision{CallID: "call-" + id, ArgsSHA256: approval.ArgsHash(agent, "bash", json.RawMessage(`{}`)),
		Outcome: approval.Approve, Approver: "alice", AlwaysAllow: &scope}
	if err := d.Sign(e.kp); err != nil {
		e.t.Fatal(err)
	}
	a := scope
	a.CallID, a.CreatedBy, a.CreatedAt, a.Grant = d.CallID, []string{"alice"}, time.Now().UTC(), d
	return a
}

func TestUnsignedAmendmentsDoNotTakeEffect(t *testing.T) {
	e := newEnv(t)
	m := e.manager("w1", e.pub)
	policyKV, _ := e.js.KeyValue(context.Background(), bus.BucketPolicy)
	rejected, err := e.nc.SubscribeSync(events.PolicyChangeSubject)
	if err != nil {
		t.Fatal(err)
	}
	good := e.granted("am-good", "bot", "make")
	put := func(a approval.Amendment) {
		t.Helper()
		val, _ := json.Marshal(a)
		if _, err := policyKV.Put(context.Background(), approval.AmendmentKeyPrefix+a.ID, val); err != nil {
			t.Fatal(err)
		}
	}
	unsigned := approval.Amendment{ID: "am-unsigned", Agent: "bot", Tool: "bash", CommandPrefix: "rm", CreatedAt: time.Now().UTC()}
	widened := e.granted("am-widened", "bot", "make")
	widened.CommandPrefix = "rm" // the signed scope said make
	stranger := e.granted("am-stranger", "bot", "curl")
	stranger.Grant.Signature = ""
	_ = stranger.Grant.Sign(must(nkeys.CreateUser()))
	foreign := e.granted("am-foreign", "bot", "curl")
	fs := trusttest.NewAccount(t).User(t, "desk", trust.RoleApprover, 0)
	foreign.Grant.Signature, foreign.Grant.SignerJWT = "", fs.JWT
	_ = foreign.Grant.Sign(fs.Key)
	for _, a := range []approval.Amendment{good, unsigned, widened, stranger, foreign} {
		put(a)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var last []approval.Amendment
	go func() {
		_ = WatchAmendments(ctx, policyKV, quietLogger(), m, func(as []approval.Amendment) { mu.Lock(); last = as; mu.Unlock() })
	}()
	e.eventually("amendments loaded", func() bool { mu.Lock(); defer mu.Unlock(); return last != nil })
	mu.Lock()
	got := last
	mu.Unlock()
	if len(got) != 1 || got[0].ID != "am-good" {
		t.Fatalf("amendments in force = %+v, want only am-good", got)
	}
	told := map[string]string{}
	for len(told) < 4 {
		msg, err := rejected.NextMsg(15 * time.Second)
		if err != nil {
			t.Fatalf("refusal events so far %v: %v", told, err)
		}
		var d events.PolicyChangeData
		ev, err := events.DecodeData(msg.Header, msg.Data, &d)
		if err != nil || ev.Type() != events.TypePolicyRejected {
			t.Fatalf("event %v %v", msg.Header, err)
		}
		told[d.Source] = strings.Join(d.Errors, "; ")
	}
	for id, want := range map[string]string{"am-unsigned": "carries no approval", "am-widened": "scope is not the one",
		"am-stranger": "neither pinned", "am-foreign": "account not trusted"} {
		if !strings.Contains(told["kv:amendments."+id], want) {
			t.Errorf("refusal of %s = %q, want %q", id, told["kv:amendments."+id], want)
		}
	}
	// Calls with no trusted verifier at all keep nothing in force.
	nctx, ncancel := context.WithCancel(context.Background())
	defer ncancel()
	seen := make(chan int, 1)
	go func() {
		_ = WatchAmendments(nctx, policyKV, quietLogger(), nil, func(as []approval.Amendment) {
			select {
			case seen <- len(as):
			default:
			}
		})
	}()
	if n := testenv.Recv(t, seen, "seen"); n != 0 {
		t.Fatalf("without a verifier %d amendments took effect", n)
	}
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
	if CallKey("agent-7", "ok-id_1") != "call.agent-7.ok-id_1" || CallKey("agent-7", "a:b@c") == "call.agent-7.a:b@c" ||
		CallKey("a", "=x") == "call.a.=x" {
		t.Fatalf("CallKey encodes wrongly: %s %s", CallKey("agent-7", "ok-id_1"), CallKey("agent-7", "a:b@c"))
	}
	// Another agent's call of the same id is a record of its own: it
	// neither conflicts with nor takes agent-7's.
	mine := &Parked{CallID: "taken", Agent: "agent-8", Tool: "bash", Arguments: json.RawMessage(`{"command":"ls"}`), Decision: ask}
	if err := m.Park(context.Background(), mine); err != nil {
		t.Fatalf("another agent parking the same id: %v", err)
	}
	if got, err := m.GetOf(context.Background(), "agent-8", "taken"); err != nil || got.Agent != "agent-8" {
		t.Fatalf("GetOf agent-8 = %+v, %v", got, err)
	}
	if got, err := m.GetOf(context.Background(), "agent-7", "taken"); err != nil || got.Agent != "agent-7" {
		t.Fatalf("GetOf agent-7 = %+v, %v", got, err)
	}
	if _, err := m.Get(context.Background(), "taken"); !errors.Is(err, ErrConflict) {
		t.Fatalf("Get of an id two agents parked = %v, want ErrConflict", err)
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
