package policyload

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/pkg/trust"
	"github.com/toolgate/toolgate/pkg/trust/trusttest"
)

func TestOpenOnlyAdminSealedPolicies(t *testing.T) {
	acct := trusttest.NewAccount(t)
	v, err := trust.NewVerifier([]string{acct.Public}, nil)
	if err != nil {
		t.Fatal(err)
	}
	doc := []byte("tools:\n  default: allow\n")
	seal := func(s trust.Signer) []byte {
		b, err := Seal(doc, "p.yaml", s, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	admin := acct.User(t, "admin", trust.RoleAdmin, 0)
	swapped := func() []byte { // a sealed envelope whose document was replaced
		var env Signed
		_ = json.Unmarshal(seal(admin), &env)
		env.Document = "tools:\n  default: deny\n"
		b, _ := json.Marshal(env)
		return b
	}
	random, _ := nkeys.CreateUser()
	tests := []struct {
		name   string
		stored []byte
		v      *trust.Verifier
		want   error
	}{
		{"admin of the install", seal(admin), v, nil},
		{"bare document", doc, v, ErrUnsignedPolicy},
		{"document replaced after sealing", swapped(), v, trust.ErrBadSignature},
		{"approver", seal(acct.User(t, "desk", trust.RoleApprover, 0)), v, trust.ErrWrongRole},
		{"agent", seal(acct.User(t, "bot", trust.RoleAgent, 0)), v, trust.ErrWrongRole},
		{"admin of another install", seal(trusttest.NewAccount(t).User(t, "admin", trust.RoleAdmin, 0)), v, trust.ErrForeignIssuer},
		{"random key", seal(trust.Signer{Key: random}), v, trust.ErrUnknownKey},
		{"no verifier", seal(admin), nil, trust.ErrForeignIssuer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, who, err := Open(tt.stored, tt.v)
			if tt.want == nil {
				if err != nil || string(got) != string(doc) || who.String() != "admin:admin" {
					t.Fatalf("Open = %q %s %v", got, who, err)
				}
				return
			}
			if !errors.Is(err, tt.want) || !errors.Is(err, ErrUnsignedPolicy) {
				t.Fatalf("Open err = %v, want %v", err, tt.want)
			}
		})
	}
}

func FuzzOpen(f *testing.F) {
	f.Add([]byte(`{"format":"toolgate.signed-policy.v1","document":"x","seal":{"public_key":"U","signature":"x"}}`))
	f.Add([]byte("tools: {}"))
	v, _ := trust.NewVerifier(nil, nil)
	f.Fuzz(func(t *testing.T, stored []byte) {
		if _, _, err := Open(stored, v); err == nil {
			t.Fatal("a verifier that trusts nothing opened a policy")
		}
	})
}
