package test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsWriteSecretsWithOut: no document or configuration example tells
// the reader to write a secret with a shell redirection (a file of the
// umask's mode, often world-readable): toolctl creds writes them itself
// with --out, mode 0600.
func TestDocsWriteSecretsWithOut(t *testing.T) {
	redirect := regexp.MustCompile(`(toolctl creds|openssl rand|creds (agent|approver|admin|worker|tool|hook|token|login)\b).*\s>>?\s*[\w./$"~]`)
	n := 0
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(p, ".md") || strings.HasSuffix(p, ".conf") || strings.HasSuffix(p, ".yaml")) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		for i, l := range strings.Split(string(b), "\n") {
			if redirect.MatchString(l) {
				t.Errorf("%s:%d writes a secret with a redirection, use --out FILE: %s", p, i+1, strings.TrimSpace(l))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("read %d documents", n)
	}
}
