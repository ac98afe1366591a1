//go:build !linux

package bash

import "github.com/toolgate/toolgate/pkg/tools"

func (b *bash) setupInit() {}

func (b *bash) allowlist(*tools.Call) execRule {
	return execRule{why: "unrestricted: this system cannot restrict execution"}
}
