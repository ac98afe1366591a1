// Package trusttest mints real NATS operator, account and user keys and
// JWTs for tests, the way toolgate's credentials are made: users issued
// directly by the account key, named, with one role tag.
package trusttest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/pkg/trust"
)

// Account is an operator and one account signed by it.
type Account struct {
	// Operator is the operator key pair.
	Operator nkeys.KeyPair
	// Key is the account key pair; it issues users.
	Key nkeys.KeyPair
	// Public is the account public key (A...).
	Public string
	// JWT is the account JWT, signed by the operator.
	JWT string
}

// NewAccount creates an operator and an account.
func NewAccount(t testing.TB) *Account {
	t.Helper()
	op, err := nkeys.CreateOperator()
	if err != nil {
		t.Fatal(err)
	}
	ak, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	apub, _ := ak.PublicKey()
	ac := jwt.NewAccountClaims(apub)
	ac.Name = "toolgate"
	tok, err := ac.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	return &Account{Operator: op, Key: ak, Public: apub, JWT: tok}
}

// User mints a user named name in role (no role tag when role is empty),
// valid for ttl (0: no expiry).
func (a *Account) User(t testing.TB, name string, role trust.Role, ttl time.Duration) trust.Signer {
	t.Helper()
	uk, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	return trust.Signer{Key: uk, JWT: a.Sign(t, uk, name, ttl, role)}
}

// Sign issues a JWT for uk with the given name, expiry and role tags.
func (a *Account) Sign(t testing.TB, uk nkeys.KeyPair, name string, ttl time.Duration, roles ...trust.Role) string {
	t.Helper()
	upub, _ := uk.PublicKey()
	uc := jwt.NewUserClaims(upub)
	uc.Name = name
	for _, r := range roles {
		if r != "" {
			uc.Tags.Add(trust.RoleTag(r))
		}
	}
	if ttl != 0 {
		uc.Expires = time.Now().Add(ttl).Unix()
	}
	tok, err := uc.Encode(a.Key)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// CredsFile writes s as a .creds file in a temporary directory and returns
// its path.
func CredsFile(t testing.TB, s trust.Signer) string {
	t.Helper()
	seed, err := s.Key.Seed()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.FormatUserConfig(s.JWT, seed)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "user.creds")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
