// Package testenv holds what tests share: finding the outside programs a
// test needs, and starting real embedded NATS servers.
package testenv

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
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

// Patience bounds a test's wait for something that should happen soon: a
// value on a channel, a process's end. A wait that runs out fails the test
// naming what it waited for, long before the test binary's timeout panics
// with every goroutine's stack and no word of what was missing.
const Patience = 2 * time.Minute

// waitContext is a context that ends after Patience, or a little before
// the test's own deadline (go test -timeout) when that comes first. It is
// not t.Context(), which is cancelled before cleanups run: cleanups wait
// with it too.
func waitContext(t testing.TB) (context.Context, context.CancelFunc) {
	end := time.Now().Add(Patience)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			if dl = dl.Add(-time.Until(dl) / 20); dl.Before(end) {
				end = dl
			}
		}
	}
	return context.WithDeadline(context.Background(), end)
}

// Recv returns the next value from ch. When none comes within Patience
// (or before the test's deadline) the test fails, saying what it waited
// for. Call it from the test's goroutine or a cleanup.
func Recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	ctx, cancel := waitContext(t)
	defer cancel()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("waited for %s: it never came (waits are bounded by %v and the test's deadline)", what, Patience)
		var zero T
		return zero
	}
}
