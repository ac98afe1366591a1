//go:build !linux

package bash

import (
	"context"
	"errors"
	"os"

	"github.com/toolgate/toolgate/pkg/sandboxinit"
	"github.com/toolgate/toolgate/pkg/tools"
)

// Sandbox templates are Linux-only (template.go).

func (b *bash) templated(Config) bool { return false }

func socketPair(int) (*os.File, *os.File, error) { return nil, nil, errors.ErrUnsupported }

func openTasks(*callCgroup) ([]*os.File, error) { return nil, errors.ErrUnsupported }

func (b *bash) logTemplate(r *os.File) { r.Close() }

func templatePid(int) (int, error) { return 0, errors.ErrUnsupported }

func rlimitList(Limits) []sandboxinit.Rlimit { return nil }

func (b *bash) runTemplated(context.Context, *tools.Call, *prepared, *plan, string, string) (*result, bool, error) {
	return nil, false, nil
}
