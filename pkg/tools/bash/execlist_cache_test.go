//go:build linux

package bash

import (
	"os"
	"path/filepath"
	"testing"
)

// TestInterpreterCacheFollowsTheFile: the cached interpreter of a program
// is the file's as it is now: a script rewritten with another #! line
// gets the new one, an ELF program its loader.
func TestInterpreterCacheFollowsTheFile(t *testing.T) {
	var c interpreterCache
	p := filepath.Join(t.TempDir(), "prog")
	for _, tt := range []struct{ text, want string }{
		{"#!/bin/sh\necho a\n", "/bin/sh"},
		{"#!/usr/bin/perl -w\nprint 1;\n", "/usr/bin/perl"},
		{"no interpreter at all\n", ""},
	} {
		if err := os.WriteFile(p, []byte(tt.text), 0o755); err != nil {
			t.Fatal(err)
		}
		for range 2 { // computed, then from the cache
			if got := c.of(p); got != tt.want {
				t.Fatalf("interpreter of %q = %q, want %q", tt.text, got, tt.want)
			}
		}
	}
	if got, want := c.of("/bin/sh"), interpreter("/bin/sh"); got != want || got == "" {
		t.Fatalf("interpreter of /bin/sh = %q, want %q", got, want)
	}
	if got := c.of(filepath.Join(t.TempDir(), "missing")); got != "" {
		t.Fatalf("interpreter of a missing file = %q", got)
	}
}
