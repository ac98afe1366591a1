// Package testenv holds what tests share: finding the outside programs a
// test needs, and starting real embedded NATS servers.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// CI reports whether the tests run under CI (CI=true), where a missing
// outside program is a failure rather than a skip.
func CI() bool { return os.Getenv("CI") == "true" }

// LookPath returns the path of program. When it is missing the test is
// skipped with a message naming the Debian package that provides it, or
// fails when CI is set, so CI always runs it.
func LookPath(t testing.TB, program, debianPackage string) string {
	t.Helper()
	p, err := exec.LookPath(program)
	if err == nil {
		return p
	}
	Missing(t, program+" not found: install the Debian package "+debianPackage+" (apt-get install -y "+debianPackage+")")
	return ""
}

// Missing skips the test, saying what it needs from the machine and how to
// get it, or fails it when CI is set, so CI always runs it: the rule of
// LookPath for what is not a program.
func Missing(t testing.TB, msg string) {
	t.Helper()
	if CI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
