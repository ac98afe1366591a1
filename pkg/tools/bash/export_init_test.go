//go:build linux

package bash

import "github.com/toolgate/toolgate/pkg/tools"

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
