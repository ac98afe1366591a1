package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// fsPolicy lets agents read through the filesystem MCP server, denies
// its writes, and leaves its other tools to the default: ask.
const fsPolicy = `default: ask
tools:
  read: allow
allow: [mcp__fs__read_text_file, mcp__fs__list_directory]
deny: [mcp__fs__write_file]
`

// TestFilesystemServerAsToolSource runs a worker with --mcp-config naming
// the reference filesystem server from npm (@modelcontextprotocol/
// server-filesystem, installed by npm ci in test/mcp) and uses its tools
// over the bus as any agent does.
func TestFilesystemServerAsToolSource(t *testing.T) {
	modules, node := npmTools(t)
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "notes.txt"), "notes from the workspace\n")
	conf := filepath.Join(t.TempDir(), "mcp.json")
	server := filepath.Join(modules, "@modelcontextprotocol", "server-filesystem", "dist", "index.js")
	writeFile(t, conf, fmt.Sprintf(`{"mcpServers":{"fs":{"command":%q,"args":[%q,%q]}}}`, node, server, ws))
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, fsPolicy)
	// The operator's overrides have the last word: one tool read-only by
	// kind, one left out.
	overrides := filepath.Join(t.TempDir(), "tools.yaml")
	writeFile(t, overrides, "tools:\n  mcp__fs__list_directory:\n    kind: read\n  mcp__fs__move_file:\n    disabled: true\n")
	w := startProcess(t, ws, func(o *daemon.Options) { o.MCPConfig = conf; o.PolicyFile = pol; o.ToolsConfig = overrides })
	c := w.client(t, "agent-fs")

	var list []events.ToolData
	eventually(t, "the filesystem server's tools in the listing", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		list, _ = c.Tools(ctx)
		want := map[string]bool{"mcp__fs__read_text_file": true, "mcp__fs__write_file": true, "mcp__fs__create_directory": true}
		for _, tl := range list {
			delete(want, tl.Name)
		}
		return len(want) == 0, fmt.Sprint(len(list), " tools")
	})
	for _, tl := range list {
		switch {
		case tl.Name == "mcp__fs__move_file":
			t.Errorf("%s is listed; the overrides disable it", tl.Name)
		case tl.Name == "mcp__fs__list_directory":
			if tl.Kind != "read" {
				t.Errorf("%s has kind %s; the overrides say read", tl.Name, tl.Kind)
			}
		case strings.HasPrefix(tl.Name, "mcp__fs__") && tl.Kind != "execute":
			t.Errorf("%s has kind %s; the server's hints must not lower it from execute", tl.Name, tl.Kind)
		}
		if tl.Name == "mcp__fs__read_text_file" && !strings.Contains(string(tl.Parameters), `"path"`) {
			t.Errorf("read_text_file schema %s", tl.Parameters)
		}
	}
	assertToolRegistered(t, w.url, "mcp__fs__read_text_file")

	// Allowed: runs in the server and comes back as a result.
	r := call(t, c, "mcp__fs__read_text_file", fmt.Sprintf(`{"path":%q}`, filepath.Join(ws, "notes.txt")))
	if r.Status != events.StatusOK || !strings.Contains(r.Output, "notes from the workspace") {
		t.Fatalf("read_text_file = %+v", r)
	}
	// Schema-checked before the server sees it.
	r = call(t, c, "mcp__fs__read_text_file", `{"path":42}`)
	if r.Status != events.StatusError || r.Error != "invalid_arguments" {
		t.Fatalf("read_text_file with a number = %+v", r)
	}
	// Denied: the file is never written.
	target := filepath.Join(ws, "written.txt")
	r = call(t, c, "mcp__fs__write_file", fmt.Sprintf(`{"path":%q,"content":"x"}`, target))
	if r.Status != events.StatusDenied {
		t.Fatalf("write_file = %+v, want denied", r)
	}
	// No rule: the default asks, and nothing happens until a person decides.
	dir := filepath.Join(ws, "newdir")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	parked := make(chan struct{})
	_, err := c.Call(ctx, "mcp__fs__create_directory", json.RawMessage(fmt.Sprintf(`{"path":%q}`, dir)),
		client.OnPending(func(events.ResultData) { close(parked); cancel() }))
	select {
	case <-parked:
	default:
		t.Fatalf("create_directory was not parked: %v", err)
	}
	for _, p := range []string{target, dir} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists: a denied or parked MCP call ran", p)
		}
	}
}

// assertToolRegistered checks that a ToolRegistered event for tool is in
// the events stream.
func assertToolRegistered(t *testing.T, url, tool string) {
	t.Helper()
	nc := dialAs(t, url, identity.RoleAdmin, "admin")
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, events.ToolEventSubject(tool))
	if err != nil {
		t.Fatalf("no event for %s: %v", tool, err)
	}
	var d events.ToolData
	ev, err := events.DecodeData(m.Header, m.Data, &d)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type() != events.TypeToolRegistered || d.Name != tool {
		t.Fatalf("last event of %s: %s %+v", tool, ev.Type(), d)
	}
}
