//go:build linux

package bash

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestInterpreterCacheFollowsTheFile: the cached interpreter of a program
// is the file's as it is now: a script rewritten with another #! line
// gets the new one, an ELF program its loader.
func TestInterpreterCacheFollowsTheFile(t *testing.T) {
	c := interpreterCache{files: fileCache[string]{recent: interpreterRecent, max: maxInterpreters}}
	p := filepath.Join(t.TempDir(), "prog")
	for _, tt := range []struct{ text, want string }{
		{"#!/bin/sh\necho a\n", "/bin/sh"},
		{"#!/usr/bin/perl -w\nprint 1;\n", "/usr/bin/perl"},
		{"no interpreter at all\n", ""},
	} {
		if err := os.WriteFile(p, []byte(tt.text), 0o755); err != nil {
			t.Fatal(err)
		}
		for range 2 { // read, then again (just written: too recent to keep)
			if got := c.of(p); got != tt.want {
				t.Fatalf("interpreter of %q = %q, want %q", tt.text, got, tt.want)
			}
		}
	}
	f, err := os.Open("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got, want := c.of("/bin/sh"), interpreterOf(f); got != want || got == "" {
		t.Fatalf("interpreter of /bin/sh = %q, want %q", got, want)
	}
	for _, p := range []string{filepath.Join(t.TempDir(), "missing"), t.TempDir()} {
		if got := c.of(p); got != "" {
			t.Fatalf("interpreter of %s = %q", p, got)
		}
	}
}

// countingCache is an interpreter cache that counts the files it reads.
func countingCache(recent time.Duration) (*interpreterCache, *int) {
	reads := new(int)
	return &interpreterCache{files: fileCache[string]{recent: recent, max: maxInterpreters}, read: func(f *os.File) string {
		*reads++
		return interpreterOf(f)
	}}, reads
}

// TestInterpreterCacheSameSize: a program rewritten with a #! line of the
// same length (same size, same inode) is read again, not served the old
// interpreter from the cache; unchanged, it is served from the cache.
func TestInterpreterCacheSameSize(t *testing.T) {
	c, reads := countingCache(0)
	p := filepath.Join(t.TempDir(), "prog")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	look := func(want string, wantReads int) {
		t.Helper()
		if got := c.of(p); got != want || *reads != wantReads {
			t.Fatalf("interpreter = %q after %d reads, want %q after %d", got, *reads, want, wantReads)
		}
	}
	write("#!/bin/sh\necho a\n")
	// Its modification time an hour ago: the rewrite below, however soon,
	// gives it another.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	look("/bin/sh", 1)
	look("/bin/sh", 1) // from the cache
	write("#!/bin/xy\necho a\n")
	look("/bin/xy", 2) // same size: read again
	look("/bin/xy", 2)
}

// TestInterpreterCacheRecent: a program changed within the cache's recent
// window is read on every look-up (a change in the same tick of the file
// system's clock would keep its times), so a same-size rewrite in that
// tick is seen.
func TestInterpreterCacheRecent(t *testing.T) {
	c, reads := countingCache(time.Hour)
	p := filepath.Join(t.TempDir(), "prog")
	for i, tt := range []struct{ text, want string }{
		{"#!/bin/sh\n", "/bin/sh"},
		{"#!/bin/sh\n", "/bin/sh"},
		{"#!/bin/xy\n", "/bin/xy"},
	} {
		if i != 1 { // the second look-up is of the file unchanged
			if err := os.WriteFile(p, []byte(tt.text), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if got := c.of(p); got != tt.want || *reads != i+1 {
			t.Fatalf("look-up %d: interpreter = %q after %d reads, want %q after %d", i, got, *reads, tt.want, i+1)
		}
	}
}

// TestInterpreterCacheBounded: the cache keeps at most maxInterpreters
// programs.
func TestInterpreterCacheBounded(t *testing.T) {
	c, reads := countingCache(0)
	dir := t.TempDir()
	for i := range maxInterpreters + 10 {
		p := filepath.Join(dir, strconv.Itoa(i))
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		c.of(p)
	}
	if *reads != maxInterpreters+10 || len(c.files.m) > maxInterpreters {
		t.Fatalf("%d reads, %d entries kept; want %d reads, at most %d kept", *reads, len(c.files.m), maxInterpreters+10, maxInterpreters)
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
