package test

import (
	"os"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/mcpsource"
)

// TestReadmeMCPConfigFormat: the --mcp-config example of the README is a
// file the worker loads, with the servers it names.
func TestReadmeMCPConfigFormat(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "`--mcp-config FILE` takes the `mcpServers` format")
	if !ok {
		t.Fatal("README.md does not describe --mcp-config's file format")
	}
	_, block, ok := strings.Cut(after, "```json\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("README.md has no json example of --mcp-config's file")
	}
	c, err := mcpsource.Parse([]byte(block))
	if err != nil {
		t.Fatalf("the README's --mcp-config example: %v\n%s", err, block)
	}
	if len(c.Servers) != 2 {
		t.Fatalf("the README's example has %d servers: %+v", len(c.Servers), c.Servers)
	}
}
