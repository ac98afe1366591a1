package test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/pkg/events"
)

// With cache enabled in the tools configuration, a repeated read is served
// from the cache and says so; an edit through toolgate retires it. With no
// configuration nothing is cached.
func TestResultCacheE2E(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config string
		cached bool
	}{
		{"off by default", "", false},
		{"enabled", "cache:\n  enabled: true\n  ttl: 10m\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := t.TempDir()
			writeFile(t, filepath.Join(ws, "notes.txt"), "alpha\nbeta\n")
			p := startProcess(t, ws, func(o *daemon.Options) {
				if tc.config != "" {
					f := filepath.Join(t.TempDir(), "tools.yaml")
					writeFile(t, f, tc.config)
					o.ToolsConfig = f
				}
			})
			c := p.client(t, "cacher")
			call := func(tool string, args map[string]any) *events.ResultData {
				t.Helper()
				r, err := c.Call(ctxT(t), tool, args)
				if err != nil || r.Status != events.StatusOK {
					t.Fatalf("%s: %v %+v", tool, err, r)
				}
				return r
			}
			first := call("read", map[string]any{"path": "notes.txt"})
			second := call("read", map[string]any{"path": "notes.txt"})
			if first.Cached || second.Cached != tc.cached || second.Output != first.Output {
				t.Fatalf("cached: first %v second %v (want %v); outputs equal %v", first.Cached, second.Cached, tc.cached, second.Output == first.Output)
			}
			call("edit", map[string]any{"path": "notes.txt", "old_string": "beta", "new_string": "gamma"})
			third := call("read", map[string]any{"path": "notes.txt"})
			if third.Cached || !strings.Contains(third.Output, "gamma") {
				t.Fatalf("read after the edit: cached %v %q", third.Cached, third.Output)
			}
		})
	}
}
