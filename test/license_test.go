package test

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestLicenseAndInstall: the repository carries the Apache-2.0 text whole
// (as NATS does), and the README tells how to put the binaries on PATH,
// which MCP and hook configurations naming toolctl rely on.
func TestLicenseAndInstall(t *testing.T) {
	b, err := os.ReadFile("../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{"Apache License", "Version 2.0, January 2004", "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
		"9. Accepting Warranty or Additional Liability.", "END OF TERMS AND CONDITIONS", "APPENDIX: How to apply the Apache License to your work."} {
		if !strings.Contains(text, want) {
			t.Errorf("LICENSE lacks %q", want)
		}
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(shellLines(string(readme)), "go install ./cmd/...") {
		t.Error("README.md has no `go install ./cmd/...` command")
	}
}
