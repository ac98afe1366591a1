package test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/trust"
	"github.com/toolgate/toolgate/pkg/trust/trusttest"
)

// TestMain gives the tests a state directory of their own.
func TestMain(m *testing.M) { testenv.Main(m) }

// stateTempDir is a fresh directory under the tests' state directory,
// outside the temp dir, removed when the test ends.
func stateTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp(os.Getenv(identity.EnvStateDir), "data-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// installAccount is the tests' install (the keys in their state
// directory) as a trusttest.Account: the account every worker started by
// the tests trusts by default, since it issued the worker's credentials.
func installAccount(t *testing.T) *trusttest.Account {
	t.Helper()
	in, err := identity.LoadInstall()
	if err != nil {
		t.Fatal(err)
	}
	j, err := in.JWTs()
	if err != nil {
		t.Fatal(err)
	}
	return &trusttest.Account{Operator: in.Operator, Key: in.Account, Public: in.AccountPublicKey, JWT: j.Account}
}

// installUser mints credentials of the tests' install for role and name,
// with the role's permissions, as `toolctl creds` does.
func installUser(t *testing.T, role identity.Role, name string) trust.Signer {
	t.Helper()
	in, err := identity.LoadInstall()
	if err != nil {
		t.Fatal(err)
	}
	c, err := in.MintCreds(role, name)
	if err != nil {
		t.Fatal(err)
	}
	return trust.SignerOf(c)
}

// installCredsFile writes credentials of the tests' install for role and
// name to a .creds file (mode 0600), as `toolctl creds` does, and returns
// its path.
func installCredsFile(t *testing.T, role identity.Role, name string) string {
	t.Helper()
	in, err := identity.LoadInstall()
	if err != nil {
		t.Fatal(err)
	}
	b, err := in.Mint(role, name)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name+".creds")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// dialAs connects to url with credentials of the tests' install for role
// and name.
func dialAs(t *testing.T, url string, role identity.Role, name string) *nats.Conn {
	t.Helper()
	nc, _, err := identity.Dial(url, "", role, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
