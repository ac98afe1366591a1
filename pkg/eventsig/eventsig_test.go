package eventsig

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/trust"
	"github.com/toolgate/toolgate/pkg/trust/trusttest"
)

type fixture struct {
	v                    *Verifier
	worker, agent, alien trust.Signer
}

func newFixture(t testing.TB) fixture {
	acct := trusttest.NewAccount(t)
	tv, err := trust.NewVerifier([]string{acct.Public}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fixture{v: New(tv), worker: acct.User(t, "w1", trust.RoleWorker, 0), agent: acct.User(t, "bot", trust.RoleAgent, 0),
		alien: trusttest.NewAccount(t).User(t, "w1", trust.RoleWorker, 0)}
}

// result encodes the result of call id of agent as a worker would, in
// mode, signed by s (unsigned when s has no key), after change.
func result(t testing.TB, s trust.Signer, agent, id string, mode events.Mode, change func(*events.Attrs, *events.ResultData)) *nats.Msg {
	t.Helper()
	a := events.Attrs{ID: agent + "." + id + ":result", Source: "toolgate://worker/w1", Type: events.TypeCallCompleted, Subject: id, Sign: Sign(s)}
	r := events.ResultData{CallID: id, Agent: agent, Tool: "read", Status: events.StatusOK, Output: "real"}
	if change != nil {
		change(&a, &r)
	}
	m, err := events.EncodeData(events.ResultSubject(agent, id), a, r, mode)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestResultVerification(t *testing.T) {
	f := newFixture(t)
	tamper := func(m *nats.Msg) *nats.Msg {
		m.Data = []byte(strings.Replace(string(m.Data), "real", "fake", 1))
		return m
	}
	tests := []struct {
		name string
		msg  *nats.Msg
		want error // nil: accepted
	}{
		{"binary", result(t, f.worker, "ann", "c1", events.Binary, nil), nil},
		{"structured", result(t, f.worker, "ann", "c1", events.Structured, nil), nil},
		{"structured bare", result(t, f.worker, "ann", "c1", events.StructuredBare, nil), nil},
		{"escaped attributes", result(t, f.worker, "ann", "c1", events.Binary, func(a *events.Attrs, _ *events.ResultData) { a.Source = "toolgate://worker/host name" }), nil},
		{"unsigned", result(t, trust.Signer{}, "ann", "c1", events.Binary, nil), ErrForged},
		{"signed by an agent", result(t, f.agent, "ann", "c1", events.Binary, nil), trust.ErrWrongRole},
		{"signed by another install's worker", result(t, f.alien, "ann", "c1", events.Binary, nil), trust.ErrForeignIssuer},
		{"data changed after signing", tamper(result(t, f.worker, "ann", "c1", events.Binary, nil)), trust.ErrBadSignature},
		{"data changed after signing, structured", tamper(result(t, f.worker, "ann", "c1", events.Structured, nil)), trust.ErrBadSignature},
		{"another call's result", result(t, f.worker, "ann", "c2", events.Binary, nil), ErrForged},
		{"another agent's result", result(t, f.worker, "bob", "c1", events.Binary, nil), ErrForged},
		{"call id in data only", result(t, f.worker, "ann", "c1", events.Binary, func(a *events.Attrs, _ *events.ResultData) { a.Subject = "c2" }), ErrForged},
		{"agent in data differs", result(t, f.worker, "ann", "c1", events.Binary, func(_ *events.Attrs, r *events.ResultData) { r.Agent = "bob" }), ErrForged},
		{"not a result", result(t, f.worker, "ann", "c1", events.Binary, func(a *events.Attrs, _ *events.ResultData) { a.Type = events.TypeCallRequested }), ErrForged},
		{"not from a worker", result(t, f.worker, "ann", "c1", events.Binary, func(a *events.Attrs, _ *events.ResultData) { a.Source = "agent://ann" }), ErrForged},
		{"event id of another call", result(t, f.worker, "ann", "c1", events.Binary, func(a *events.Attrs, _ *events.ResultData) { a.ID = "ann.c9:result" }), ErrForged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := f.v.Result(tt.msg.Header, tt.msg.Data, "ann", "c1", "")
			if tt.want == nil {
				if err != nil || r.Output != "real" {
					t.Fatalf("Result = %+v, %v", r, err)
				}
				return
			}
			if !errors.Is(err, tt.want) || !errors.Is(err, ErrForged) || r != nil {
				t.Fatalf("Result = %+v, %v; want %v", r, err, tt.want)
			}
		})
	}
	if _, err := New(nil).Result(tests[0].msg.Header, tests[0].msg.Data, "ann", "c1", ""); !errors.Is(err, ErrForged) {
		t.Fatalf("a verifier that trusts nothing: %v", err)
	}
}

func TestAuditVerification(t *testing.T) {
	f := newFixture(t)
	audit := func(s trust.Signer, subject, id string, a events.AuditData) *nats.Msg {
		m, err := events.EncodeData(subject, events.Attrs{ID: id, Source: "toolgate://worker/w1", Type: events.TypeCallAudited, Sign: Sign(s)}, a, events.Binary)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	good := events.AuditData{Kind: events.AuditExecution, CallID: "c1", Agent: "ann", Tool: "read", Status: events.StatusOK}
	tests := []struct {
		name string
		msg  *nats.Msg
		ok   bool
	}{
		{"signed by a worker", audit(f.worker, events.AuditSubject("ann", "read"), "ann.c1:audit", good), true},
		{"unsigned", audit(trust.Signer{}, events.AuditSubject("ann", "read"), "ann.c1:audit", good), false},
		{"stored under another agent", audit(f.worker, events.AuditSubject("bob", "read"), "ann.c1:audit", good), false},
		{"stored under another tool", audit(f.worker, events.AuditSubject("ann", "bash"), "ann.c1:audit", good), false},
		{"id of another call", audit(f.worker, events.AuditSubject("ann", "read"), "ann.c2:audit", good), false},
		{"signed by an agent", audit(f.agent, events.AuditSubject("ann", "read"), "ann.c1:audit", good), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, a, err := f.v.Audit(tt.msg.Subject, tt.msg.Header, tt.msg.Data)
			if tt.ok != (err == nil) || (tt.ok && a.CallID != "c1") {
				t.Fatalf("Audit = %+v, %v", a, err)
			}
		})
	}
}

// FuzzResult: whatever bytes and headers arrive, the verifier never
// panics, and never accepts a message unless it is the signed original.
func FuzzResult(f *testing.F) {
	fx := newFixture(f)
	for _, mode := range []events.Mode{events.Binary, events.Structured, events.StructuredBare} {
		m := result(f, fx.worker, "ann", "c1", mode, nil)
		f.Add(m.Data, m.Header.Get("ce-toolgatesig"), m.Header.Get("ce-id"), int(mode))
	}
	orig := result(f, fx.worker, "ann", "c1", events.Binary, nil)
	f.Fuzz(func(t *testing.T, data []byte, sig, id string, mode int) {
		h := nats.Header{}
		if mode%2 == 0 {
			for k, v := range orig.Header {
				h[k] = append([]string(nil), v...)
			}
			h.Set("ce-toolgatesig", sig)
			h.Set("ce-id", id)
		}
		r, err := fx.v.Result(h, data, "ann", "c1", "")
		if err == nil && mode%2 == 0 && (string(data) != string(orig.Data) || sig != orig.Header.Get("ce-toolgatesig") || id != orig.Header.Get("ce-id")) {
			t.Fatalf("accepted a changed message: %+v", r)
		}
	})
}
