//go:build linux

package bash

import (
	"testing"

	"github.com/toolgate/toolgate/pkg/tools"
)

// SetSandboxInit makes tools made from now on look for
// toolgate-sandbox-init at p instead of beside the test binary ("" goes
// back to that); it returns the previous setting.
func SetSandboxInit(p string) string {
	old := sandboxInitPath
	sandboxInitPath = p
	return old
}

// NewWithInit is New, and the first program its restricted calls start
// with ("" when they are never restricted).
func NewWithInit(cfg Config) (*tools.Tool, string, error) {
	b, err := newBash(cfg)
	if err != nil {
		return nil, "", err
	}
	return b.tool(), b.init, nil
}

// NewPrepared is New with Config.Prepared, a function that says how many
// calls ran in a prepared sandbox so far, and one that waits until the
// sandboxes being prepared are ready; the prepared sandboxes left are
// discarded when t ends.
func NewPrepared(t testing.TB, cfg Config) (tool *tools.Tool, used func() int, settle func()) {
	b := newPrepared(t, cfg)
	return b.tool(), func() int { return int(b.pool.used.Load()) }, b.pool.wg.Wait
}

// newPrepared is the tool of cfg with Config.Prepared; its prepared
// sandboxes are discarded when t ends.
func newPrepared(t testing.TB, cfg Config) *bash {
	t.Helper()
	cfg.Prepared = true
	b, err := newBash(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if b.pool == nil {
		t.Fatalf("no sandboxes are prepared here (sandbox %s, first program %q)", b.sb, b.init)
	}
	t.Cleanup(b.pool.close)
	return b
}
