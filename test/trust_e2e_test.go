package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/parking"
	"github.com/toolgate/toolgate/internal/policyload"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/toolctl"
	"github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/trust"
	"github.com/toolgate/toolgate/pkg/trust/trusttest"
)

// askBash is a policy under which every shell command needs a person.
const askBash = `tools:
  default: allow
  run_shell:
    action: ask
`

// writable lets commands, which run as nobody when the worker is root,
// leave markers in the workspace.
func writable(t *testing.T, s *approvalStack) {
	t.Helper()
	if err := os.Chmod(s.worker.ws, 0o777); err != nil {
		t.Fatal(err)
	}
}

// bus returns a connection and JetStream context on the stack's server
// with every permission of the account: an insider who can write any
// bucket and publish on any subject, the strongest attacker on the bus.
func (s *approvalStack) bus(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.worker.url, nats.UserCredentials(trusttest.CredsFile(t, s.acct.User(t, "intruder", "", 0))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	return nc, js
}

// tamper rewrites the parked record of id in the approvals bucket.
func tamper(t *testing.T, js jetstream.JetStream, id string, change func(p *parking.Parked)) {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), bus.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		p0, _, err := parking.GetParked(context.Background(), kv, "", id)
		if err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(context.Background(), parking.CallKey(p0.Agent, id))
		if err != nil {
			t.Fatal(err)
		}
		var p parking.Parked
		if err := json.Unmarshal(e.Value(), &p); err != nil {
			t.Fatal(err)
		}
		change(&p)
		val, _ := json.Marshal(&p)
		if _, err := kv.Update(context.Background(), parking.CallKey(p0.Agent, id), val, e.Revision()); err == nil {
			return
		}
	}
	t.Fatalf("could not rewrite the record of %s", id)
}

func parked(t *testing.T, js jetstream.JetStream, id string) *parking.Parked {
	t.Helper()
	kv, _ := js.KeyValue(context.Background(), bus.BucketApprovals)
	p0, _, err := parking.GetParked(context.Background(), kv, "", id)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), parking.CallKey(p0.Agent, id))
	if err != nil {
		t.Fatal(err)
	}
	var p parking.Parked
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// signedDecision is an approval of hash for id signed by signer.
func signedDecision(t *testing.T, id, hash, who string, signer trust.Signer) *approval.Decision {
	t.Helper()
	d := &approval.Decision{CallID: id, ArgsSHA256: hash, Outcome: approval.Approve, Approver: who, SignerJWT: signer.JWT}
	if err := d.Sign(signer.Key); err != nil {
		t.Fatal(err)
	}
	return d
}

func publishDecision(t *testing.T, js jetstream.JetStream, d *approval.Decision) {
	t.Helper()
	msg, err := events.NewMessage(events.ApprovalDecisionSubject(d.CallID), fmt.Sprintf("forged-%s-%d", d.CallID, time.Now().UnixNano()),
		"toolgate://approver/elsewhere", events.TypeApprovalDecided, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
}

// refusedWith waits for a refusal event on sub whose reason contains want.
func refusedWith(t *testing.T, sub *nats.Subscription, want string) {
	t.Helper()
	var seen []string
	for {
		m, err := sub.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("no refusal saying %q (saw %q): %v", want, seen, err)
		}
		var r struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(m.Data, &r)
		if strings.Contains(r.Reason, want) {
			return
		}
		seen = append(seen, r.Reason)
	}
}

func absent(t *testing.T, ws string, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(ws, n)); err == nil {
			t.Errorf("%s exists: a refused call ran", n)
		}
	}
}

// TestTamperedParkedArgumentsNeverRun is the attack of a person or process
// with write access to the approvals bucket: the approved `echo fine` must
// never run as the command written into the record after parking.
func TestTamperedParkedArgumentsNeverRun(t *testing.T) {
	testenv.LookPath(t, "bash", "bash")
	s := startApprovalStackWith(t, askBash)
	writable(t, s)
	_, js := s.bus(t)
	c := s.worker.client(t, "agent-t")
	evil := json.RawMessage(`{"command":"id; echo TAMPERED-RAN > tampered.marker"}`)

	t.Run("control: an untouched approved call runs", func(t *testing.T) {
		final := submitBash(t, c, "control", "touch approved.marker")
		var res map[string]any
		if code := s.api(t, "POST", "/api/approvals/control/approve", `{}`, &res); code != 200 {
			t.Fatalf("approve = %d %v", code, res)
		}
		if r := wait(t, final); r.Status != events.StatusOK {
			t.Fatalf("final result %+v", r)
		}
		if _, err := os.Stat(filepath.Join(s.worker.ws, "approved.marker")); err != nil {
			t.Fatalf("the approved command left no marker: %v", err)
		}
	})

	t.Run("altered before the decision", func(t *testing.T) {
		final := submitBash(t, c, "tamper-before", "touch fine.marker")
		hash := parked(t, js, "tamper-before").ArgsSHA256
		tamper(t, js, "tamper-before", func(p *parking.Parked) { p.Arguments = evil })
		var body map[string]any
		if code := s.api(t, "POST", "/api/approvals/tamper-before/approve", `{}`, &body); code != 400 || !strings.Contains(fmt.Sprint(body), "altered") {
			t.Fatalf("approving an altered record through the approver = %d %v, want 400", code, body)
		}
		// An approval signed before the change, as from a page loaded earlier.
		nc, _ := s.bus(t)
		sub, _ := nc.SubscribeSync(approval.RefusedSubject("tamper-before"))
		publishDecision(t, js, signedDecision(t, "tamper-before", hash, "alice", s.approver))
		refusedWith(t, sub, parking.ErrTampered.Error())
		if code := s.api(t, "POST", "/api/approvals/tamper-before/reject", `{"reason":"record altered"}`, nil); code != 200 {
			t.Fatalf("reject = %d", code)
		}
		if r := wait(t, final); r.Status != events.StatusRejected {
			t.Fatalf("final result %+v", r)
		}
		absent(t, s.worker.ws, "tampered.marker", "fine.marker")
	})

	t.Run("altered after the approval was recorded", func(t *testing.T) {
		final := submitBash(t, c, "tamper-after", "touch fine2.marker")
		p := parked(t, js, "tamper-after")
		d := signedDecision(t, "tamper-after", p.ArgsSHA256, "alice", s.approver)
		// Approved, with a valid signed approval of the original arguments,
		// its resume claim lapsed: any worker's sweep resumes it.
		tamper(t, js, "tamper-after", func(p *parking.Parked) {
			p.Arguments = evil
			p.Status, p.Approvals, p.Final = approval.Approved, []approval.Decision{*d}, d
			p.Outcome = &parking.Outcome{Status: approval.Approved, Approvers: []string{"alice"}, DecidedAt: time.Now().UTC()}
		})
		r := wait(t, final)
		if r.Status != events.StatusRejected || !strings.Contains(r.Output, "refused at resume") {
			t.Fatalf("final result %+v", r)
		}
		absent(t, s.worker.ws, "tampered.marker", "fine2.marker")
	})
}

// TestForgedDecisionsAndAmendmentsAreRefused publishes decisions and
// amendments as someone on the bus who is not an approver of the install.
func TestForgedDecisionsAndAmendmentsAreRefused(t *testing.T) {
	testenv.LookPath(t, "bash", "bash")
	s := startApprovalStackWith(t, askBash)
	writable(t, s)
	nc, js := s.bus(t)
	c := s.worker.client(t, "agent-t")
	random, _ := nkeys.CreateUser()
	tests := []struct {
		name   string
		signer trust.Signer
		who    string
		want   string
	}{
		{"forged: random key", trust.Signer{Key: random}, "alice", "neither pinned nor vouched"},
		{"foreign approver key: valid JWT of another account", trusttest.NewAccount(t).User(t, "approver", trust.RoleApprover, 0), "alice", "account not trusted here"},
		{"agent-role JWT of the install", s.acct.User(t, "agent-t", trust.RoleAgent, 0), "alice", "wrong role"},
		{"the install's approver naming the agent as the person", s.approver, "Agent_T", "cannot approve its own call"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("forged-%d", i)
			marker := fmt.Sprintf("forged-%d.marker", i)
			final := submitBash(t, c, id, "touch "+marker)
			sub, _ := nc.SubscribeSync(approval.RefusedSubject(id))
			publishDecision(t, js, signedDecision(t, id, parked(t, js, id).ArgsSHA256, tt.who, tt.signer))
			refusedWith(t, sub, tt.want)
			if code := s.api(t, "POST", "/api/approvals/"+id+"/reject", `{"reason":"forged"}`, nil); code != 200 {
				t.Fatalf("reject = %d", code)
			}
			if r := wait(t, final); r.Status != events.StatusRejected {
				t.Fatalf("final result %+v", r)
			}
			absent(t, s.worker.ws, marker)
		})
	}

	t.Run("control: an amendment an approver granted takes effect", func(t *testing.T) {
		final := submitBash(t, c, "grant", "touch granted.marker")
		if code := s.api(t, "POST", "/api/approvals/grant/approve", `{"always_allow":{"command_prefix":"touch"}}`, nil); code != 200 {
			t.Fatalf("approve and always allow = %d", code)
		}
		if r := wait(t, final); r.Status != events.StatusOK {
			t.Fatalf("final result %+v", r)
		}
		eventually(t, "the granted command runs without asking", func() (bool, string) {
			r := call(t, c, "bash", `{"command":"touch granted2.marker"}`)
			return r.Status == events.StatusOK, string(r.Status)
		})
		if _, err := os.Stat(filepath.Join(s.worker.ws, "granted2.marker")); err != nil {
			t.Fatalf("no marker of the amended command: %v", err)
		}
	})

	t.Run("unsigned amendment", func(t *testing.T) {
		changes, _ := nc.SubscribeSync(events.PolicyChangeSubject)
		policyKV, err := js.KeyValue(context.Background(), bus.BucketPolicy)
		if err != nil {
			t.Fatal(err)
		}
		a := approval.Amendment{ID: "evil", Agent: "agent-t", Tool: "bash", CommandPrefix: "mkdir", CreatedAt: time.Now().UTC()}
		val, _ := json.Marshal(a)
		if _, err := policyKV.Put(context.Background(), approval.AmendmentKeyPrefix+a.ID, val); err != nil {
			t.Fatal(err)
		}
		for {
			m, err := changes.NextMsg(30 * time.Second)
			if err != nil {
				t.Fatalf("no policy.rejected event for the amendment: %v", err)
			}
			var d events.PolicyChangeData
			ev, err := events.DecodeData(m.Header, m.Data, &d)
			if err == nil && ev.Type() == events.TypePolicyRejected && d.Source == "kv:amendments.evil" {
				if !strings.Contains(strings.Join(d.Errors, " "), "carries no approval") {
					t.Fatalf("refusal says %q", d.Errors)
				}
				break
			}
		}
		final := submitBash(t, c, "amended", "mkdir amended.marker") // still parks
		if code := s.api(t, "POST", "/api/approvals/amended/reject", `{"reason":"no"}`, nil); code != 200 {
			t.Fatalf("reject = %d", code)
		}
		wait(t, final)
		absent(t, s.worker.ws, "amended.marker")
	})
}

// TestUnsignedPolicyPushIsRefused pushes policies a worker must not take:
// a bare document written into the bucket, one signed by an agent of the
// install, one by the admin of another install. Each is refused with a
// policy.rejected event and the policy in force stays.
func TestUnsignedPolicyPushIsRefused(t *testing.T) {
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "hello\n")
	acct := installAccount(t)
	p := startProcess(t, ws, nil)
	c := p.client(t, "agent-q")
	nc, _, err := identity.Dial(p.url, "", identity.RoleAdmin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	policyKV, err := js.KeyValue(context.Background(), bus.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	changes, _ := nc.SubscribeSync(events.PolicyChangeSubject)
	denyRead := []byte("tools:\n  default: allow\n  read:\n    action: deny\n")
	file := filepath.Join(t.TempDir(), "deny-read.yaml")
	writeFile(t, file, string(denyRead))

	rejected := func(want string) {
		t.Helper()
		for {
			m, err := changes.NextMsg(30 * time.Second)
			if err != nil {
				t.Fatalf("no policy.rejected saying %q: %v", want, err)
			}
			var d events.PolicyChangeData
			ev, err := events.DecodeData(m.Header, m.Data, &d)
			if err != nil {
				continue
			}
			if ev.Type() == events.TypePolicyApplied && d.Source == "kv:policy" {
				t.Fatalf("a pushed policy was applied: %+v", d)
			}
			if ev.Type() == events.TypePolicyRejected && strings.Contains(strings.Join(d.Errors, " "), want) {
				return
			}
		}
	}
	stays := func() {
		t.Helper()
		if r := call(t, c, "read", `{"path":"README.md"}`); r.Status != events.StatusOK {
			t.Fatalf("the policy in force changed: %+v", r)
		}
	}

	if _, err := policyKV.Put(context.Background(), policyload.Key, denyRead); err != nil {
		t.Fatal(err)
	}
	rejected("not a sealed policy")
	stays()

	// toolctl refuses to sign with anything but admin credentials, so an
	// agent's or another install's seal is written into the bucket
	// directly, as a client with bus access could.
	doc, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		signer trust.Signer
		want   string
	}{
		{"an agent of the install", acct.User(t, "agent-q", trust.RoleAgent, 0), "wrong role"},
		{"another install's admin", trusttest.NewAccount(t).User(t, "admin", trust.RoleAdmin, 0), "account not trusted here"},
	} {
		sealed, err := policyload.Seal(doc, file, tc.signer, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := policyKV.Put(context.Background(), policyload.Key, sealed); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		rejected(tc.want)
		stays()
	}
	agent := trusttest.CredsFile(t, installUser(t, identity.RoleAgent, "agent-q"))
	if _, errOut, code := p.toolctl(t, "policy", "push", file, "--creds", agent); code == toolctl.ExitOK || !strings.Contains(errOut, "admin") {
		t.Fatalf("toolctl pushed with agent credentials: %d %s", code, errOut)
	}
	stays()

	admin := trusttest.CredsFile(t, acct.User(t, "admin", trust.RoleAdmin, 0))
	if _, errOut, code := p.toolctl(t, "policy", "push", file, "--creds", admin); code != toolctl.ExitOK {
		t.Fatalf("push with the admin: %d %s", code, errOut)
	}
	eventually(t, "the admin's policy", func() (bool, string) {
		r := call(t, c, "read", `{"path":"README.md"}`)
		return r.Status == events.StatusDenied, string(r.Status)
	})
}
