package testenv

import (
	"testing"

	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/pkg/eventsig"
	"github.com/toolgate/toolgate/pkg/trust"
)

// WorkerSigning returns a worker's signer minted from the tests' install
// (the state directory Main made) and a verifier trusting that install's
// account, as a worker started by toolgate's daemon has them; account is
// the account's public key, for client.WithTrustedAccounts.
func WorkerSigning(t testing.TB) (signer trust.Signer, v *eventsig.Verifier, account string) {
	t.Helper()
	in, err := identity.LoadInstall()
	if err != nil {
		t.Fatalf("install: %v", err)
	}
	cr, err := in.MintCreds(identity.RoleWorker, "test-worker")
	if err != nil {
		t.Fatalf("mint worker credentials: %v", err)
	}
	tv, err := trust.NewVerifier([]string{cr.Account}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return trust.Signer{Key: cr.Key, JWT: cr.JWT}, eventsig.New(tv), cr.Account
}
