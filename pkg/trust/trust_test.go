package trust_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/pkg/trust"
	"github.com/toolgate/toolgate/pkg/trust/trusttest"
)

func TestVerifierKeyAndSeal(t *testing.T) {
	acct := trusttest.NewAccount(t)
	foreign := trusttest.NewAccount(t)
	pinnedKP, _ := nkeys.CreateUser()
	pinned, _ := pinnedKP.PublicKey()
	v, err := trust.NewVerifier([]string{acct.Public}, map[trust.Role][]string{trust.RoleApprover: {pinned}})
	if err != nil {
		t.Fatal(err)
	}
	random, _ := nkeys.CreateUser()
	approver := acct.User(t, "desk", trust.RoleApprover, time.Hour)
	otherKey, _ := nkeys.CreateUser()
	tests := []struct {
		name    string
		signer  trust.Signer
		roles   []trust.Role
		want    error
		wantWho string
	}{
		{"approver JWT from the trusted account", approver, []trust.Role{trust.RoleApprover}, nil, "approver:desk"},
		{"admin signing where an approver may", acct.User(t, "root", trust.RoleAdmin, 0), []trust.Role{trust.RoleApprover, trust.RoleAdmin}, nil, "admin:root"},
		{"pinned key", trust.Signer{Key: pinnedKP}, []trust.Role{trust.RoleApprover}, nil, "approver:pinned:" + pinned},
		{"pinned key in another role", trust.Signer{Key: pinnedKP}, []trust.Role{trust.RoleAdmin}, trust.ErrWrongRole, ""},
		{"random key, no JWT", trust.Signer{Key: random}, []trust.Role{trust.RoleApprover}, trust.ErrUnknownKey, ""},
		{"valid JWT from a foreign account", foreign.User(t, "desk", trust.RoleApprover, time.Hour), []trust.Role{trust.RoleApprover}, trust.ErrForeignIssuer, ""},
		{"agent JWT", acct.User(t, "agent-x", trust.RoleAgent, time.Hour), []trust.Role{trust.RoleApprover}, trust.ErrWrongRole, ""},
		{"no role tag", acct.User(t, "desk", "", time.Hour), []trust.Role{trust.RoleApprover}, trust.ErrWrongRole, ""},
		{"two role tags", trust.Signer{Key: otherKey, JWT: acct.Sign(t, otherKey, "x", 0, trust.RoleApprover, trust.RoleAgent)}, []trust.Role{trust.RoleApprover}, trust.ErrWrongRole, ""},
		{"expired JWT", acct.User(t, "desk", trust.RoleApprover, -time.Minute), []trust.Role{trust.RoleApprover}, trust.ErrExpired, ""},
		{"somebody else's JWT with my key", trust.Signer{Key: random, JWT: approver.JWT}, []trust.Role{trust.RoleApprover}, trust.ErrKeyMismatch, ""},
		{"garbage JWT", trust.Signer{Key: random, JWT: "eyJhbGciOi.nope.nope"}, []trust.Role{trust.RoleApprover}, trust.ErrBadJWT, ""},
	}
	msg := []byte(`{"doc":1}`)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seal, err := tc.signer.Sign(msg)
			if err != nil {
				t.Fatal(err)
			}
			id, err := v.Check(&seal, msg, tc.roles...)
			if tc.want != nil {
				if !errors.Is(err, tc.want) || !errors.Is(err, trust.ErrUntrusted) {
					t.Fatalf("err = %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil || id.String() != tc.wantWho {
				t.Fatalf("identity %q, err %v; want %q", id, err, tc.wantWho)
			}
		})
	}
	seal, _ := approver.Sign(msg)
	if _, err := v.Check(&seal, []byte(`{"doc":2}`), trust.RoleApprover); !errors.Is(err, trust.ErrBadSignature) {
		t.Fatalf("seal over other bytes: %v", err)
	}
	if _, err := v.Check(nil, msg, trust.RoleApprover); !errors.Is(err, trust.ErrUnsigned) {
		t.Fatalf("no seal: %v", err)
	}
	var nothing *trust.Verifier
	if _, err := nothing.Check(&seal, msg, trust.RoleApprover); !errors.Is(err, trust.ErrForeignIssuer) {
		t.Fatalf("a nil verifier must trust nothing: %v", err)
	}
}

func TestNewVerifierRefusesWrongKeys(t *testing.T) {
	acct := trusttest.NewAccount(t)
	u, _ := nkeys.CreateUser()
	upub, _ := u.PublicKey()
	for name, tc := range map[string]struct {
		accounts []string
		pinned   map[trust.Role][]string
	}{
		"user key as account":   {accounts: []string{upub}},
		"account key as pinned": {pinned: map[trust.Role][]string{trust.RoleApprover: {acct.Public}}},
		"one key pinned twice":  {pinned: map[trust.Role][]string{trust.RoleApprover: {upub}, trust.RoleAdmin: {upub}}},
		"garbage":               {accounts: []string{"nope"}},
	} {
		if _, err := trust.NewVerifier(tc.accounts, tc.pinned); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestSignerFromCreds(t *testing.T) {
	acct := trusttest.NewAccount(t)
	s := acct.User(t, "admin", trust.RoleAdmin, 0)
	c, err := identity.LoadCreds(trusttest.CredsFile(t, s))
	if err != nil {
		t.Fatal(err)
	}
	got := trust.SignerOf(c)
	if got.JWT != s.JWT {
		t.Fatal("JWT changed")
	}
	v, err := trust.NewVerifier([]string{acct.Public}, nil)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("policy")
	seal, err := got.Sign(msg)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := v.Check(&seal, msg, trust.RoleAdmin); err != nil || id.Name != "admin" {
		t.Fatalf("seal of the credentials' signer: %+v %v", id, err)
	}
}

func TestFold(t *testing.T) {
	same := [][2]string{{"agent-x", "Agent-X"}, {"agent_x", "AGENT.X"}, {"agentx", "agent x"}, {"ǅemal", "ǆemal"}, {"\u212aelvin", "kelvin"}, {"K", "k"}, {"---", "+"}}
	for _, p := range same {
		if !trust.SameName(p[0], p[1]) {
			t.Errorf("%q and %q must be one name", p[0], p[1])
		}
	}
	differ := [][2]string{{"alice", "bob"}, {"agent-x", "agent-y"}, {"a1", "a2"}}
	for _, p := range differ {
		if trust.SameName(p[0], p[1]) {
			t.Errorf("%q and %q must differ", p[0], p[1])
		}
	}
}

func FuzzFold(f *testing.F) {
	f.Add("Agent-X")
	f.Add("ǅ\u212a")
	f.Fuzz(func(t *testing.T, s string) {
		if trust.Fold(trust.Fold(s)) != trust.Fold(s) {
			t.Fatalf("Fold is not idempotent on %q", s)
		}
	})
}

func FuzzKey(f *testing.F) {
	acct := trusttest.NewAccount(f)
	s := acct.User(f, "desk", trust.RoleApprover, 0)
	pub, _ := s.Key.PublicKey()
	f.Add(pub, s.JWT)
	f.Add("U", "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.x")
	other := trusttest.NewAccount(f)
	v, _ := trust.NewVerifier([]string{other.Public}, nil)
	f.Fuzz(func(t *testing.T, key, tok string) {
		// Only JWTs of the trusted account (other) may pass; none is given.
		if id, err := v.Key(key, tok, trust.RoleApprover, trust.RoleAdmin, trust.RoleWorker, trust.RoleAgent); err == nil {
			t.Fatalf("trusted %s without a JWT of the trusted account", id)
		}
	})
}
