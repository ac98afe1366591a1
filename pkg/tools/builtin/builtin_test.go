package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// env is a workspace with the built-in tools registered behind a real
// pipeline.
type env struct {
	dir string
	reg *tools.Registry
	p   *tools.Pipeline
}

func newEnv(t testing.TB, cfg Config, opts ...tools.PipelineOption) *env {
	t.Helper()
	if cfg.Workspace == "" {
		cfg.Workspace = t.TempDir()
	}
	reg := tools.NewRegistry()
	if err := Register(reg, cfg); err != nil {
		t.Fatalf("Register: %v", err)
	}
	opts = append([]tools.PipelineOption{tools.WithWorkspace(cfg.Workspace)}, opts...)
	return &env{dir: cfg.Workspace, reg: reg, p: tools.NewPipeline(reg, opts...)}
}

// call runs one call through the pipeline.
func (e *env) call(t testing.TB, name string, args map[string]any) (*tools.Output, error) {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return e.p.Handle(context.Background(), &tools.Call{ID: "c1", Agent: "test", Name: name, Arguments: raw})
}

// ok runs a call that must succeed and returns its output.
func (e *env) ok(t testing.TB, name string, args map[string]any) *tools.Output {
	t.Helper()
	out, err := e.call(t, name, args)
	if err != nil {
		t.Fatalf("%s %v: error %v", name, args, err)
	}
	if out.IsError {
		t.Fatalf("%s %v: tool error: %s", name, args, out.Content)
	}
	return out
}

// toolErr runs a call that must fail as a tool error and returns it.
func (e *env) toolErr(t testing.TB, name string, args map[string]any) *tools.Output {
	t.Helper()
	out, err := e.call(t, name, args)
	if err != nil {
		t.Fatalf("%s %v: pipeline error %v, want a tool error", name, args, err)
	}
	if !out.IsError {
		t.Fatalf("%s %v: succeeded, want a tool error: %s", name, args, out.Content)
	}
	return out
}

func (e *env) write(t testing.TB, rel, content string) string {
	t.Helper()
	p := filepath.Join(e.dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// denyGate allows every call but refuses real paths containing deny.
type denyGate struct{ deny string }

func (g denyGate) Evaluate(context.Context, policy.Request) policy.Decision {
	return policy.Decision{Action: policy.Allow, Reason: "test"}
}

func (g denyGate) CheckPath(_ policy.Request, real string) policy.Decision {
	if strings.Contains(real, g.deny) {
		return policy.Decision{Action: policy.Deny, Reason: "denied path " + real, Rule: "test.denied_paths"}
	}
	return policy.Decision{Action: policy.Allow}
}

func TestRegisterListsTools(t *testing.T) {
	e := newEnv(t, Config{})
	for _, name := range []string{"read", "read_file", "ls", "list_files"} {
		tool, ok := e.reg.Get(name)
		if !ok {
			t.Fatalf("%s not registered", name)
		}
		if tool.Description == "" || len(tool.Parameters) == 0 || tool.Kind == "" {
			t.Errorf("%s: incomplete definition %+v", name, tool)
		}
	}
}

func TestRegisterRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no workspace", Config{}, "workspace"},
		{"missing workspace", Config{Workspace: "/nonexistent/toolgate"}, "nonexistent"},
		{"negative size", Config{Workspace: t.TempDir(), MaxReadSize: -1}, "max_read_size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Register(tools.NewRegistry(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Register = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

func TestRead(t *testing.T) {
	e := newEnv(t, Config{MaxReadSize: 1 << 20, MaxLineLength: 50})
	e.write(t, "a.txt", "one\ntwo\nthree\nfour\nfive\n")
	e.write(t, "noeol.txt", "alpha\nbeta")
	e.write(t, "empty.txt", "")
	e.write(t, "long.txt", strings.Repeat("x", 120)+"\nshort\n")
	e.write(t, "bin.dat", "ab\x00cd")
	e.write(t, "latin1.txt", "caf\xe9\n")
	e.write(t, "dir/inner.txt", "in\n")
	for _, tc := range []struct {
		name      string
		args      map[string]any
		want      []string // substrings of the content
		notWant   []string
		meta      map[string]any
		wantError bool
	}{
		{name: "whole file", args: map[string]any{"path": "a.txt"},
			want: []string{"     1\tone\n", "     5\tfive\n"}, meta: map[string]any{"total_lines": 5, "start_line": int64(1), "end_line": int64(5)}},
		{name: "alias path absolute", args: map[string]any{"path": filepath.Join(e.dir, "a.txt")},
			want: []string{"     3\tthree\n"}},
		{name: "offset limit", args: map[string]any{"path": "a.txt", "offset": 2, "limit": 2},
			want: []string{"     2\ttwo\n", "     3\tthree\n", "continue with offset=4"}, notWant: []string{"one", "four"},
			meta: map[string]any{"truncated": true, "next_offset": int64(4)}},
		{name: "start end", args: map[string]any{"path": "a.txt", "start_line": 4, "end_line": 5},
			want: []string{"     4\tfour\n", "     5\tfive\n"}, notWant: []string{"three"}},
		{name: "no final newline", args: map[string]any{"path": "noeol.txt"},
			want: []string{"     2\tbeta\n"}, meta: map[string]any{"total_lines": 2}},
		{name: "empty", args: map[string]any{"path": "empty.txt"}, want: []string{"is empty"}, meta: map[string]any{"total_lines": 0}},
		{name: "long line clipped", args: map[string]any{"path": "long.txt"},
			want: []string{strings.Repeat("x", 50) + "... [70 characters clipped]", "     2\tshort"}, meta: map[string]any{"clipped_lines": 1}},
		{name: "binary NUL", args: map[string]any{"path": "bin.dat"}, want: []string{"binary file (5 bytes"}, notWant: []string{"ab"}, meta: map[string]any{"binary": true}},
		{name: "binary invalid utf8", args: map[string]any{"path": "latin1.txt"}, want: []string{"binary file"}},
		{name: "directory suggests ls", args: map[string]any{"path": "dir"}, want: []string{"dir is a directory", "use ls"}, wantError: true},
		{name: "missing", args: map[string]any{"path": "nope.txt"}, want: []string{"nope.txt: no such file"}, wantError: true},
		{name: "past end", args: map[string]any{"path": "a.txt", "offset": 9}, want: []string{"line 9 is past the end", "5 lines"}, wantError: true},
		{name: "mixed windows", args: map[string]any{"path": "a.txt", "offset": 1, "end_line": 2}, want: []string{"not both"}, wantError: true},
		{name: "end before start", args: map[string]any{"path": "a.txt", "start_line": 3, "end_line": 2}, want: []string{"before start_line"}, wantError: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out *tools.Output
			if tc.wantError {
				out = e.toolErr(t, "read", tc.args)
			} else {
				out = e.ok(t, "read_file", tc.args)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.Content, w) {
					t.Errorf("content lacks %q:\n%s", w, out.Content)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(out.Content, w) {
					t.Errorf("content has %q:\n%s", w, out.Content)
				}
			}
			for k, v := range tc.meta {
				if got := out.Metadata[k]; got != v {
					t.Errorf("metadata %s = %v (%T), want %v (%T)", k, got, got, v, v)
				}
			}
		})
	}
}

func TestReadRefusesTooLargeWithSize(t *testing.T) {
	e := newEnv(t, Config{MaxReadSize: 100})
	e.write(t, "big.txt", strings.Repeat("a", 101))
	out := e.toolErr(t, "read", map[string]any{"path": "big.txt"})
	if !strings.Contains(out.Content, "101 bytes") || !strings.Contains(out.Content, "limit is 100") {
		t.Fatalf("content %q does not give the size and the limit", out.Content)
	}
	if out.Metadata["error"] != "too_large" {
		t.Fatalf("metadata %v", out.Metadata)
	}
}

func TestReadBoundsOutput(t *testing.T) {
	e := newEnv(t, Config{MaxOutput: 1000})
	var b strings.Builder
	for range 500 {
		b.WriteString("a line of forty characters, more or less\n")
	}
	e.write(t, "many.txt", b.String())
	out := e.ok(t, "read", map[string]any{"path": "many.txt"})
	if len(out.Content) > 1000 {
		t.Fatalf("content is %d bytes, above max_output", len(out.Content))
	}
	next, ok := out.Metadata["next_offset"].(int64)
	if !ok || next < 2 || out.Metadata["truncated"] != true {
		t.Fatalf("metadata %v: want truncated and next_offset", out.Metadata)
	}
	// Continuing from next_offset shows the following line first.
	out = e.ok(t, "read", map[string]any{"path": "many.txt", "offset": next, "limit": 1})
	if !strings.HasPrefix(strings.TrimLeft(out.Content, " "), itoa(int(next))+"\t") {
		t.Fatalf("continuation starts %q", out.Content[:20])
	}
}

func TestReadDeniedRealPath(t *testing.T) {
	e := newEnv(t, Config{}, tools.WithGate(denyGate{deny: "secrets"}))
	e.write(t, "secrets/server.pem", "KEY\n")
	if err := os.Symlink("secrets/server.pem", filepath.Join(e.dir, "notes.txt")); err != nil {
		t.Fatal(err)
	}
	_, err := e.call(t, "read", map[string]any{"path": "notes.txt"})
	if !errors.Is(err, tools.ErrDenied) {
		t.Fatalf("read via link: err %v, want ErrDenied", err)
	}
	var pe *tools.PolicyError
	if !errors.As(err, &pe) || pe.Decision.Rule != "test.denied_paths" {
		t.Fatalf("err %v: want the gate's decision", err)
	}
}

func TestLs(t *testing.T) {
	e := newEnv(t, Config{})
	e.write(t, "b.txt", "12345")
	e.write(t, "a.txt", "1")
	e.write(t, ".hidden", "h")
	e.write(t, "sub/x", "x")
	if err := os.Symlink("a.txt", filepath.Join(e.dir, "link")); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2024, 3, 4, 5, 6, 7, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(e.dir, "b.txt"), mtime, mtime); err != nil {
		t.Fatal(err)
	}
	out := e.ok(t, "ls", map[string]any{})
	lines := strings.Split(strings.TrimSpace(out.Content), "\n")
	var names []string
	for _, l := range lines {
		f := strings.Fields(l)
		names = append(names, f[3])
	}
	if got, want := strings.Join(names, " "), "a.txt b.txt link sub/"; got != want {
		t.Fatalf("names %q, want %q\n%s", got, want, out.Content)
	}
	if !strings.Contains(out.Content, "file               5  2024-03-04T05:06:07Z  b.txt") {
		t.Errorf("b.txt line lacks type, size or mtime:\n%s", out.Content)
	}
	if !strings.Contains(out.Content, "symlink") || !strings.Contains(out.Content, "link -> a.txt") || !strings.Contains(out.Content, "dir ") {
		t.Errorf("types missing:\n%s", out.Content)
	}
	if out.Metadata["truncated"] != false || out.Metadata["count"] != 4 {
		t.Errorf("metadata %v", out.Metadata)
	}

	out = e.ok(t, "list_files", map[string]any{"hidden": true, "limit": 2})
	if !strings.Contains(out.Content, ".hidden") || out.Metadata["truncated"] != true || out.Metadata["total"] != 5 || out.Metadata["count"] != 2 {
		t.Fatalf("hidden+limit: %v\n%s", out.Metadata, out.Content)
	}

	out = e.ok(t, "ls", map[string]any{"path": "sub"})
	if !strings.Contains(out.Content, " x\n") {
		t.Fatalf("ls sub:\n%s", out.Content)
	}
	out = e.toolErr(t, "ls", map[string]any{"path": "a.txt"})
	if !strings.Contains(out.Content, "a.txt is not a directory") {
		t.Fatalf("ls file: %s", out.Content)
	}
	out = e.toolErr(t, "ls", map[string]any{"path": "../"})
	if out.Metadata["error"] != "outside_workspace" {
		t.Fatalf("ls ..: %v %s", out.Metadata, out.Content)
	}
}

func TestSchemaRejectsBadArguments(t *testing.T) {
	e := newEnv(t, Config{})
	for _, tc := range []struct {
		tool  string
		args  map[string]any
		field string
	}{
		{"read", map[string]any{}, "path"},
		{"read", map[string]any{"path": "a", "limit": 0}, "limit"},
		{"read", map[string]any{"path": "a", "offset": "x"}, "offset"},
		{"ls", map[string]any{"bogus": true}, "bogus"},
	} {
		_, err := e.call(t, tc.tool, tc.args)
		var ae *tools.ArgumentError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s %v: err %v, want an ArgumentError naming %s", tc.tool, tc.args, err, tc.field)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
