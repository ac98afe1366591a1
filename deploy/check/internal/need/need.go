// Package need finds the outside programs the shipping checks run: a test
// without one skips, naming the Debian package that brings it, and fails
// under CI (CI=true), whose .ci/run installs it.
package need

import (
	"os"
	"os/exec"
	"testing"
)

// Program returns program's path; without it the test skips, or fails
// when CI is set, saying which Debian package to install.
func Program(t testing.TB, program, debianPackage string) string {
	t.Helper()
	p, err := exec.LookPath(program)
	if err == nil {
		return p
	}
	msg := program + " not found: install the Debian package " + debianPackage + " (apt-get install -y " + debianPackage + ")"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}
