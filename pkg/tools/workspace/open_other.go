//go:build !linux

package workspace

import "os"

func openDirFD(string) *os.File { return nil }

// openFast is Linux's openat2 fast path; elsewhere every open takes the
// slow path.
func openFast(*root, string, int) (*os.File, string, bool) { return nil, "", false }
