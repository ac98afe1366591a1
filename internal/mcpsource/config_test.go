package mcpsource

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, doc string
		err       string // substring of the error; empty means valid
	}{
		{"claude code stdio and http", `{"mcpServers":{
			"fs":{"command":"npx","args":["-y","@modelcontextprotocol/server-filesystem","/w"],"env":{"A":"b"}},
			"gh":{"type":"http","url":"https://api.example.com/mcp","headers":{"Authorization":"Bearer ${GH_TOKEN}"}}}}`, ""},
		{"kind override", `{"mcpServers":{"fs":{"command":"x","kind":"read"}}}`, ""},
		{"disabled is skipped", `{"mcpServers":{"a__b":{"command":"x","disabled":true}}}`, ""},
		{"no servers", `{}`, `no "mcpServers"`},
		{"not json", `{"mcpServers":`, "invalid MCP servers"},
		{"unknown field", `{"mcpServers":{"fs":{"command":"x","cmd":"y"}}}`, `unknown field "cmd"`},
		{"both", `{"mcpServers":{"fs":{"command":"x","url":"http://h/mcp"}}}`, "mcpServers.fs: give either command or url"},
		{"neither", `{"mcpServers":{"fs":{}}}`, "mcpServers.fs: give a command"},
		{"bad name", `{"mcpServers":{"a.b":{"command":"x"}}}`, "mcpServers.a.b: the name"},
		{"double underscore", `{"mcpServers":{"a__b":{"command":"x"}}}`, "mcpServers.a__b: the name"},
		{"sse", `{"mcpServers":{"s":{"type":"sse","url":"http://h/sse"}}}`, "SSE transport is not supported"},
		{"bad url", `{"mcpServers":{"s":{"url":"ftp://h/x"}}}`, "mcpServers.s.url"},
		{"headers on stdio", `{"mcpServers":{"s":{"command":"x","headers":{"a":"b"}}}}`, "mcpServers.s.headers"},
		{"env on http", `{"mcpServers":{"s":{"url":"http://h/mcp","env":{"a":"b"}}}}`, "args and env are for a command"},
		{"bad kind", `{"mcpServers":{"s":{"command":"x","kind":"harmless"}}}`, "mcpServers.s.kind"},
		{"type mismatch", `{"mcpServers":{"s":{"type":"http","command":"x"}}}`, "needs a url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.doc))
			if tt.err == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				for _, n := range c.Names() {
					if c.Servers[n].Disabled {
						t.Errorf("disabled server %s listed", n)
					}
				}
				return
			}
			if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("Parse err = %v, want ErrConfig containing %q", err, tt.err)
			}
		})
	}
}

func TestKindIsConservative(t *testing.T) {
	c, err := Parse([]byte(`{"mcpServers":{"a":{"command":"x"},"b":{"command":"x","kind":"read"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if k := c.Servers["a"].kind(); k != "execute" {
		t.Errorf("default kind %s, want execute", k)
	}
	if k := c.Servers["b"].kind(); k != "read" {
		t.Errorf("configured kind %s, want read", k)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"mcpServers":{"fs":{"command":"npx","args":["-y"],"env":{"A":"b"}}}}`))
	f.Add([]byte(`{"mcpServers":{"gh":{"url":"https://h/mcp","headers":{"A":"b"}}}}`))
	f.Add([]byte(`{"mcpServers":{"":{}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v is not ErrConfig", err)
			}
			return
		}
		for _, n := range c.Names() {
			s := c.Servers[n]
			if (s.Command == "") == (s.URL == "") {
				t.Fatalf("server %s accepted with command %q and url %q", n, s.Command, s.URL)
			}
			if len(ToolName(n, "x")) > 64 || strings.ContainsAny(n, ".*> ") {
				t.Fatalf("server name %q accepted", n)
			}
		}
	})
}
