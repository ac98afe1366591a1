package testenv

import (
	"fmt"
	"os"
	"testing"

	"github.com/toolgate/toolgate/internal/egress/relay"
	"github.com/toolgate/toolgate/internal/identity"
)

// Main runs a package's tests with a state directory of their own
// (TOOLGATE_STATE_DIR), so the keys and credentials of the user running
// them are neither used nor created, and removes it afterwards. The
// directory is not under the temp dir: some tests' policies open /tmp to
// the tools, and a worker refuses state an agent can reach. Call it from
// TestMain: func TestMain(m *testing.M) { testenv.Main(m) }.
func Main(m *testing.M) {
	// A worker run by the test (bash granted the network) starts this
	// binary as the relay inside its sandbox.
	relay.MaybeForward()
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
