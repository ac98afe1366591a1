package worker

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/internal/parking"
	"github.com/toolgate/toolgate/internal/testenv"
	papproval "github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// approvalRig is a worker with an approvals manager and a gate that asks
// about echo and peek unless denyEcho is set.
type approvalRig struct {
	s        *testenv.Server
	ctr      *counter
	kp       nkeys.KeyPair
	denyEcho atomic.Bool
	nc       *nats.Conn
	w        *running
}

func newApprovalRig(t *testing.T) *approvalRig {
	t.Helper()
	r := &approvalRig{s: testenv.StartNATS(t, ""), ctr: &counter{}}
	var err error
	if r.kp, err = nkeys.CreateUser(); err != nil {
		t.Fatal(err)
	}
	pub, _ := r.kp.PublicKey()
	gate := policy.EvaluatorFunc(func(_ context.Context, req policy.Request) policy.Decision {
		if req.Tool == "echo" || req.Tool == "peek" {
			if r.denyEcho.Load() {
				return policy.Decision{Action: policy.Deny, Reason: "echo is now forbidden", Rule: "tools.echo.deny"}
			}
			return policy.Decision{Action: policy.Ask, Reason: "echo needs a person", Rule: "tools.echo.ask"}
		}
		return policy.Decision{Action: policy.Allow}
	})
	reg := testRegistry(t, r.ctr, nil)
	nc, js := r.s.Connect(t)
	r.nc = nc
	// The worker provisions the bus; the manager needs its buckets.
	w := startWorker(t, r.s.ClientURL(), reg, Config{Bus: fastBus}, tools.WithGate(gate))
	mgr, err := parking.NewManager(ctxT(t), js, parking.Options{TrustedKeys: []string{pub}, SweepInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.w = w
	w.w.cfg.Parker = ManagerParker{M: mgr}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Run(ctx, w.w.Resume) }()
	t.Cleanup(func() { cancel(); testenv.Recv(t, done, "done") })
	return r
}

// decide publishes a signed decision for a parked call as the approver
// service does.
func (r *approvalRig) decide(t *testing.T, callID, argsHash string, outcome papproval.Outcome, who, reason string) {
	t.Helper()
	d := &papproval.Decision{CallID: callID, ArgsSHA256: argsHash, Outcome: outcome, Approver: who, Reason: reason, DecidedAt: time.Now().UTC()}
	if err := d.Sign(r.kp); err != nil {
		t.Fatal(err)
	}
	ev, err := events.New("decision-"+callID+"-"+who, "toolgate://approver/test", events.TypeApprovalDecided, d)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := events.Encode(events.ApprovalDecisionSubject(callID), ev, events.Binary)
	if err := r.nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
}

func (r *approvalRig) askAndWaitPending(t *testing.T, c *client.Client, id, text string, opts ...client.CallOption) (hash string, final chan *events.ResultData) {
	t.Helper()
	pending := make(chan events.ResultData, 1)
	final = make(chan *events.ResultData, 1)
	go func() {
		// An error (the test ended first) leaves res nil; waitFinal fails on it.
		opts = append(opts, client.WithID(id), client.OnPending(func(r events.ResultData) { pending <- r }))
		res, _ := c.Call(ctxT(t), "echo", map[string]any{"text": text}, opts...)
		final <- res
	}()
	select {
	case p := <-pending:
		if p.Status != events.StatusPending || p.Decision == nil || p.Decision.Rule != "tools.echo.ask" {
			t.Fatalf("pending = %+v", p)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no pending result")
	}
	args, _ := json.Marshal(map[string]any{"text": text})
	return papproval.ArgsHash(c.Agent(), "echo", args), final
}

func waitFinal(t *testing.T, final chan *events.ResultData) *events.ResultData {
	t.Helper()
	select {
	case r := <-final:
		if r == nil {
			t.Fatal("the call ended without a final result")
		}
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no final result")
		return nil
	}
}

func TestApprovedCallRunsOnce(t *testing.T) {
	r := newApprovalRig(t)
	c, _ := newClient(t, r.s, "asker")
	audit, _ := r.nc.SubscribeSync(events.AuditSubject("asker", "echo"))
	hash, final := r.askAndWaitPending(t, c, "ask-1", "please")
	if r.ctr.get("ask-1") != 0 {
		t.Fatal("ran before approval")
	}
	r.decide(t, "ask-1", hash, papproval.Approve, "alice", "")
	res := waitFinal(t, final)
	if res.Status != events.StatusOK || res.Output != "please" || res.Decision == nil || strings.Join(res.Decision.Approvers, ",") != "alice" {
		t.Fatalf("final = %+v", res)
	}
	// A second decision changes nothing: the worker refuses it (the call
	// is decided already) and runs nothing. Its refusal is the event that
	// shows it was handled.
	refused, _ := r.nc.SubscribeSync(papproval.RefusedSubject("ask-1"))
	r.decide(t, "ask-1", hash, papproval.Approve, "bob", "")
	for {
		m, err := refused.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("the second decision was never refused: %v", err)
		}
		var why struct{ Approver string }
		if _, err := events.DecodeData(m.Header, m.Data, &why); err == nil && why.Approver == "bob" {
			break
		}
	}
	if n := r.ctr.get("ask-1"); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
	// The audit: the gate's ask and the people's approval as they
	// happened, then the execution, carrying the approval and the gate's
	// judgement of the resumed call (no decision event of its own).
	var trail []events.AuditData
	for {
		m, err := audit.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var a events.AuditData
		ev, err := events.DecodeData(m.Header, m.Data, &a)
		if err != nil {
			t.Fatal(err)
		}
		trail = append(trail, a)
		if ev.Type() == events.TypeCallAudited {
			break
		}
	}
	if len(trail) != 3 {
		t.Fatalf("audit trail of %d events, want 3: %+v", len(trail), trail)
	}
	gate, people, a := trail[0], trail[1], trail[2]
	if gate.Kind != events.AuditDecision || gate.Decision == nil || gate.Decision.Action != "ask" || strings.Join(gate.DecidedBy, ",") != "policy" {
		t.Errorf("gate's decision = %+v", gate)
	}
	if people.Kind != events.AuditDecision || people.Decision == nil || people.Decision.Action != "approved" || strings.Join(people.DecidedBy, ",") != "alice" {
		t.Errorf("people's decision = %+v", people)
	}
	if a.Approval == nil || a.Approval.Outcome != "approved" || a.Approval.Approvers[0] != "alice" {
		t.Fatalf("audit = %+v", a)
	}
	if !a.Resumed || a.Decision == nil || a.Decision.Action != "ask" || strings.Join(a.DecidedBy, ",") != "policy" || a.DecidedAt.IsZero() ||
		strings.Join(a.Decision.Approvers, ",") != "alice" {
		t.Errorf("execution audit without the resumed call's judgement: %+v", a)
	}
}

func TestRejectedCallDoesNotRun(t *testing.T) {
	r := newApprovalRig(t)
	c, _ := newClient(t, r.s, "asker")
	hash, final := r.askAndWaitPending(t, c, "ask-2", "no")
	r.decide(t, "ask-2", hash, papproval.Reject, "alice", "not today")
	res := waitFinal(t, final)
	if res.Status != events.StatusRejected || !strings.Contains(res.Output, "not today") || !strings.Contains(res.Output, "alice") {
		t.Fatalf("final = %+v", res)
	}
	if r.ctr.get("ask-2") != 0 {
		t.Fatal("a rejected call ran")
	}
}

func TestApprovedCallDeniedMeanwhileIsDenied(t *testing.T) {
	r := newApprovalRig(t)
	c, _ := newClient(t, r.s, "asker")
	hash, final := r.askAndWaitPending(t, c, "ask-3", "later")
	r.denyEcho.Store(true)
	r.decide(t, "ask-3", hash, papproval.Approve, "alice", "")
	res := waitFinal(t, final)
	if res.Status != events.StatusDenied || res.Decision == nil || res.Decision.Rule != "tools.echo.deny" {
		t.Fatalf("final = %+v", res)
	}
	if r.ctr.get("ask-3") != 0 {
		t.Fatal("a call denied meanwhile ran")
	}
}

func TestDecisionForOtherArgumentsIsRefused(t *testing.T) {
	r := newApprovalRig(t)
	c, _ := newClient(t, r.s, "asker")
	_, final := r.askAndWaitPending(t, c, "ask-4", "exact")
	other, _ := json.Marshal(map[string]any{"text": "something else"})
	r.decide(t, "ask-4", papproval.ArgsHash("asker", "echo", other), papproval.Approve, "alice", "")
	select {
	case res := <-final:
		if res != nil {
			t.Fatalf("a decision for other arguments resumed the call: %+v", res)
		}
	case <-time.After(time.Second):
	}
	if r.ctr.get("ask-4") != 0 {
		t.Fatal("ran on a tampered decision")
	}
}

// TestJudgeOnlyCallsAreJudgedAndApprovedButNeverRun: a judge-only call
// goes through the gate and the approvals as any call, and whether the
// gate allows it, people approve it or people reject it, the tool never
// runs and the worker counts no execution; the audit says judge_only.
func TestJudgeOnlyCallsAreJudgedAndApprovedButNeverRun(t *testing.T) {
	r := newApprovalRig(t)
	c, _ := newClient(t, r.s, "asker")
	audit, _ := r.nc.SubscribeSync(events.AuditSubject("asker", "echo"))

	hash, final := r.askAndWaitPending(t, c, "judge-1", "approve me", client.JudgeOnly())
	r.decide(t, "judge-1", hash, papproval.Approve, "alice", "")
	res := waitFinal(t, final)
	if res.Status != events.StatusOK || res.Metadata["judge_only"] != true || res.Output == "approve me" ||
		res.Decision == nil || strings.Join(res.Decision.Approvers, ",") != "alice" {
		t.Fatalf("approved judge-only result = %+v", res)
	}
	var a events.AuditData
	for {
		m, err := audit.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := events.DecodeData(m.Header, m.Data, &a)
		if err != nil {
			t.Fatal(err)
		}
		if !a.JudgeOnly {
			t.Fatalf("audit event %s of a judge-only call lacks judge_only: %+v", ev.Type(), a)
		}
		if ev.Type() == events.TypeCallAudited {
			break
		}
	}

	hash, final = r.askAndWaitPending(t, c, "judge-2", "reject me", client.JudgeOnly())
	r.decide(t, "judge-2", hash, papproval.Reject, "alice", "no")
	if res := waitFinal(t, final); res.Status != events.StatusRejected {
		t.Fatalf("rejected judge-only result = %+v", res)
	}

	// The gate allows fail: judged, not run.
	res, err := c.Call(ctxT(t), "fail", map[string]any{}, client.WithID("judge-3"), client.JudgeOnly())
	if err != nil || res.Status != events.StatusOK || res.IsError || res.Metadata["judge_only"] != true {
		t.Fatalf("allowed judge-only result = %+v, %v", res, err)
	}

	if calls, runs := r.ctr.total(); calls != 0 || runs != 0 {
		t.Fatalf("tools ran for judge-only calls: %d calls, %d runs", calls, runs)
	}
	if n := r.w.w.Executions(); n != 0 {
		t.Fatalf("executions = %d, want 0 for judge-only calls", n)
	}
}
