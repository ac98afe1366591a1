package policy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mvdan.cc/sh/v3/syntax"
)

func benchGate(b *testing.B) (*Gate, string) {
	b.Helper()
	p, _, err := Load("testdata/seed000.yaml")
	if err != nil {
		b.Fatal(err)
	}
	ws := b.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "main.go"), []byte("package main\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	return NewGate(p), ws
}

// BenchmarkPlainTool is a decision on a tool without arguments to analyse
// (an MCP tool under tools.default).
func BenchmarkPlainTool(b *testing.B) {
	g, ws := benchGate(b)
	req := Request{Agent: "agent-1", Tool: "mcp__tickets__create", Known: true, Kind: KindNetwork, Workspace: ws}
	b.ReportAllocs()
	for b.Loop() {
		if d := g.Evaluate(context.Background(), req); d.Action != Ask {
			b.Fatal(d)
		}
	}
}

// BenchmarkReadPath is a read_file decision: a path resolved through the
// file system and matched against three denied_paths globs.
func BenchmarkReadPath(b *testing.B) {
	g, ws := benchGate(b)
	req := Request{Agent: "agent-1", Tool: "read_file", Known: true, Kind: KindRead, Arguments: map[string]any{"path": "main.go"}, Workspace: ws}
	b.ReportAllocs()
	for b.Loop() {
		if d := g.Evaluate(context.Background(), req); d.Action != Allow {
			b.Fatal(d)
		}
	}
}

// BenchmarkPipeline5 is a run_shell decision on a five-command pipeline,
// every command whitelisted.
func BenchmarkPipeline5(b *testing.B) {
	g, ws := benchGate(b)
	req := Request{Agent: "agent-1", Tool: "run_shell", Known: true, Kind: KindExecute,
		Arguments: map[string]any{"command": `cat main.go | grep -n func | grep -v test | ls -la | git diff --stat`}, Workspace: ws}
	b.ReportAllocs()
	for b.Loop() {
		if d := g.Evaluate(context.Background(), req); d.Action != Allow {
			b.Fatal(d)
		}
	}
}

// BenchmarkBaselineParse5 is the floor under BenchmarkPipeline5: parsing
// the same command with mvdan.cc/sh and nothing else.
func BenchmarkBaselineParse5(b *testing.B) {
	src := `cat main.go | grep -n func | grep -v test | ls -la | git diff --stat`
	b.ReportAllocs()
	for b.Loop() {
		if _, err := syntax.NewParser().Parse(strings.NewReader(src), ""); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBaselineStat is the floor under BenchmarkReadPath: resolving
// the same path (lstat + stat) and nothing else.
func BenchmarkBaselineStat(b *testing.B) {
	_, ws := benchGate(b)
	p := filepath.Join(ws, "main.go")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := os.Lstat(p); err != nil {
			b.Fatal(err)
		}
		if _, err := filepath.EvalSymlinks(p); err != nil {
			b.Fatal(err)
		}
	}
}
