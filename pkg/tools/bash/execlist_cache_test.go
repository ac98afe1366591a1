//go:build linux

package bash

import (
	"os"
	"path/filepath"
	"slices"
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

// TestExecListOnlyFiles: the allowlist holds regular files only: not a
// directory a script's #! line names (its rule would allow all beneath
// it), not a missing path.
func TestExecListOnlyFiles(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/usr\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	got := execList("/bin/sh", []string{script, dir, filepath.Join(dir, "missing")})
	if len(got) == 0 || !slices.Contains(got, script) {
		t.Fatalf("execList = %q: the script is missing", got)
	}
	for _, p := range got {
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("execList = %q: %s is not a regular file", got, p)
		}
	}
}
