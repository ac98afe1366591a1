package test

import (
	"fmt"
	"os"
	"testing"

	"github.com/toolgate/toolgate/internal/identity"
)

// TestMain gives the tests a state directory of their own, so keys and
// credentials of the user running them are neither used nor created. It
// is not under the temp dir: some tests' policies open /tmp to the tools,
// and the worker refuses state an agent can reach.
func TestMain(m *testing.M) {
	base, err := os.UserCacheDir()
	if err == nil {
		err = os.MkdirAll(base, 0o700)
	}
	if err != nil {
		base = ""
	}
	dir, err := os.MkdirTemp(base, "toolgate-test-state-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv(identity.EnvStateDir, dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

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
