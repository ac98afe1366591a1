package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/toolgate/toolgate/internal/egress/relay"
	"github.com/toolgate/toolgate/internal/identity"
)

// UserEnv are the environment variables through which a user's own
// toolgate set-up reaches a program: credentials, tokens, the server and
// approver to talk to, keys to trust, search and trace settings. Main
// clears them, so a test sees only what it sets itself.
var UserEnv = []string{
	"NATS_URL",
	identity.EnvCreds,
	"TOOLGATE_AGENT",
	"TOOLGATE_TOKEN",
	"TOOLGATE_APPROVER",
	"TOOLGATE_TRUSTED_APPROVERS",
	"TOOLGATE_SEARCH_URL",
	"TAVILY_API_KEY",
	"TRACEPARENT",
	"TRACESTATE",
	"OTEL_EXPORTER_OTLP_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_TRACES_EXPORTER",
	"OTEL_METRICS_EXPORTER",
}

// Main runs a package's tests apart from the user running them, and
// removes what it made afterwards: a state directory of their own
// (TOOLGATE_STATE_DIR), XDG_STATE_HOME and XDG_CONFIG_HOME of their own
// (for a test that clears TOOLGATE_STATE_DIR to exercise the default),
// and none of UserEnv. So the keys, credentials and approver tokens of the
// user are neither read nor created, wherever HOME is. Call it from
// TestMain: func TestMain(m *testing.M) { testenv.Main(m) }. Every test
// package whose binary reaches the state directory must (see
// TestEveryTestBinaryIsolatesState).
func Main(m *testing.M) {
	// A worker run by the test (bash granted the network) starts this
	// binary as the relay inside its sandbox.
	relay.MaybeForward()
	base, err := isolate()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(base)
	os.Exit(code)
}

// isolate makes the directories Main promises and points the environment
// at them; it returns the directory holding them all.
func isolate() (string, error) {
	base, err := os.MkdirTemp(stateBase(), "toolgate-test-")
	if err != nil {
		return "", err
	}
	dirs := map[string]string{
		identity.EnvStateDir: filepath.Join(base, "state"),
		"XDG_STATE_HOME":     filepath.Join(base, "xdg-state"),
		"XDG_CONFIG_HOME":    filepath.Join(base, "xdg-config"),
	}
	for env, dir := range dirs {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			os.RemoveAll(base)
			return "", err
		}
		os.Setenv(env, dir)
	}
	for _, env := range UserEnv {
		os.Unsetenv(env)
	}
	return base, nil
}

// stateBase is where Main makes its directories: the user's cache
// directory, unless that lies in the temp directory (HOME under /tmp),
// then /var/tmp. Never the temp directory itself: some tests' policies
// open it to the tools, and a worker refuses state an agent can reach.
func stateBase() string {
	tmp := os.TempDir()
	for _, cand := range []func() (string, error){os.UserCacheDir, func() (string, error) { return "/var/tmp", nil }} {
		dir, err := cand()
		if err != nil || identity.Within(dir, tmp) || identity.Within(dir, "/tmp") {
			continue
		}
		if os.MkdirAll(dir, 0o700) == nil {
			return dir
		}
	}
	return ""
}
