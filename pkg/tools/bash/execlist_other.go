//go:build !linux

package bash

import "github.com/toolgate/toolgate/pkg/tools"

func (b *bash) setupExecList() {}

func (b *bash) allowlist(_ *tools.Call, argv []string) ([]string, []string) { return nil, argv }
