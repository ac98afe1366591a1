package tooloverride

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

func tool(name string, kind policy.Kind) *tools.Tool {
	return &tools.Tool{Name: name, Kind: kind, Description: "orig", Handler: tools.HandlerFunc(func(context.Context, *tools.Call) (*tools.Output, error) {
		return &tools.Output{}, nil
	})}
}

func TestOverridesApplyToEveryRegistration(t *testing.T) {
	c, err := Parse([]byte(`
tools:
  bash:
    disabled: true
  "mcp__fs__*":
    kind: read
    timeout: 5s
  mcp__fs__write_file:
    kind: write
    description: Write a file through the filesystem server.
  "mcp__evil__*":
    disabled: true
`))
	if err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	reg.SetOverride(c.Apply)
	for _, tl := range []*tools.Tool{tool("bash", policy.KindExecute), tool("read", policy.KindRead),
		tool("mcp__fs__read_text_file", policy.KindExecute), tool("mcp__fs__write_file", policy.KindExecute),
		tool("mcp__evil__steal", policy.KindExecute)} {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(reg.Names(), " "); got != "mcp__fs__read_text_file mcp__fs__write_file read" {
		t.Fatalf("registered %s", got)
	}
	rt, _ := reg.Get("mcp__fs__read_text_file")
	if rt.Kind != policy.KindRead || rt.DefaultTimeout != 5*time.Second || rt.Description != "orig" {
		t.Errorf("read_text_file = %+v", rt)
	}
	wf, _ := reg.Get("mcp__fs__write_file")
	if wf.Kind != policy.KindWrite || wf.DefaultTimeout != 5*time.Second || !strings.HasPrefix(wf.Description, "Write a file") {
		t.Errorf("write_file = kind %s timeout %s %q; the exact name must win over the glob", wf.Kind, wf.DefaultTimeout, wf.Description)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{"tools:\n  a:\n    kind: harmless\n", "tools.a.kind"},
		{"tools:\n  a:\n    disable: true\n", "field disable not found"},
		{"tools:\n  \"[\":\n    kind: read\n", "not a tool name or glob"},
		{"tools:\n  a:\n    timeout: -1s\n", "cannot be negative"},
		{"tools:\n  a:\n    timeout: soon\n", "invalid tool overrides"},
	} {
		_, err := Parse([]byte(tt.doc))
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want ErrConfig with %q", tt.doc, err, tt.want)
		}
	}
}
