package policy

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestRejudgeMatchesALiveCall: for each rendering kind, the gate's view of
// a call judged again (under the policy it ran under and under others)
// comes to the decision a live call gets under that policy.
func TestRejudgeMatchesALiveCall(t *testing.T) {
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "keys"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"README.md": "hi\n", "keys/server.pem": "k\n", "notes.txt": "n\n"} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(ws, "keys/server.pem"), filepath.Join(ws, "link.txt")); err != nil {
		t.Fatal(err)
	}
	policies := map[string]string{
		"builtin": string(DefaultDocument()),
		"strict": `
tools:
  read: {action: allow, constraints: {denied_paths: ["**/*.pem"]}}
  bash: {whitelist: ["ls *", "cat *", "git status"], security: allowlist, ask: off}
  web_fetch: allow
network: {allow: ["example.com"]}
agents:
  ci-*:
    tools: {read: deny}
`,
		"open": "default: allow\nexec: {security: full, ask: off, confirm_dangerous: false}\nnetwork: {allow: ['*']}\n",
	}
	calls := []struct {
		name, agent, tool string
		args              map[string]any
	}{
		{"plain read", "dev-1", "read", map[string]any{"path": "README.md"}},
		{"read through a symlink", "dev-1", "read", map[string]any{"path": "link.txt"}},
		{"read by an overlay's agent", "ci-7", "read", map[string]any{"path": "README.md"}},
		{"write", "dev-1", "write", map[string]any{"path": "notes.txt", "content": "secret body"}},
		{"compound command", "dev-1", "bash", map[string]any{"command": "ls -la && cat keys/server.pem"}},
		{"sh -c", "dev-1", "bash", map[string]any{"command": "sh -c 'cat link.txt; git status'"}},
		{"command through a symlink", "dev-1", "bash", map[string]any{"command": "cat link.txt"}},
		{"working directory", "dev-1", "bash", map[string]any{"command": "ls", "workdir": "keys"}},
		{"forbidden", "dev-1", "bash", map[string]any{"command": "sudo id"}},
		{"unparsable", "dev-1", "bash", map[string]any{"command": "ls $("}},
		{"glob pattern", "dev-1", "glob", map[string]any{"pattern": "../**/*.md"}},
		{"network", "dev-1", "web_fetch", map[string]any{"url": "https://example.com/a?q=1"}},
		{"network elsewhere", "dev-1", "web_fetch", map[string]any{"url": "https://other.example:8443/"}},
	}
	gates := map[string]*Gate{}
	for name, doc := range policies {
		p, _, err := Parse([]byte(doc), name)
		if err != nil {
			t.Fatal(err)
		}
		gates[name] = NewGate(p)
	}
	ctx := context.Background()
	for _, c := range calls {
		req := Request{Agent: c.agent, Tool: c.tool, Known: true, Arguments: c.args, Workspace: ws}
		req.Kind, _ = BuiltinKind(c.tool)
		for then, g := range gates {
			d := g.Evaluate(ctx, req)
			if d.Judged == nil {
				t.Fatalf("%s under %s: no view of the call", c.name, then)
			}
			for now, g2 := range gates {
				live, again := g2.Evaluate(ctx, req), g2.Rejudge(ctx, c.agent, c.tool, d.Judged)
				if live.Action != again.Action || live.Rule != again.Rule {
					t.Errorf("%s (ran under %s), under %s: live %s by %s (%s), rejudged %s by %s (%s); view %+v",
						c.name, then, now, live.Action, live.Rule, live.Reason, again.Action, again.Rule, again.Reason, *d.Judged)
				}
			}
		}
	}
}

// TestJudgedKeepsNoPayload: the view of a write holds its path, not its
// content; a read through a symlink holds the real path it judged, and
// judging it again takes that path even once the link is gone.
func TestJudgedKeepsNoPayload(t *testing.T) {
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "server.pem"), []byte("k"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(ws, "notes.txt")
	if err := os.Symlink(filepath.Join(ws, "server.pem"), link); err != nil {
		t.Fatal(err)
	}
	p, _, err := Parse([]byte("tools:\n  read: {action: allow, constraints: {denied_paths: ['**/*.pem']}}\n  write: allow\n"), "p")
	if err != nil {
		t.Fatal(err)
	}
	g, ctx := NewGate(p), context.Background()
	w := g.Evaluate(ctx, Request{Agent: "a", Tool: "write", Known: true, Kind: KindWrite, Workspace: ws,
		Arguments: map[string]any{"path": "out.txt", "content": "the payload"}})
	if j := w.Judged; j == nil || j.Path != "out.txt" || j.Command != "" || j.Workspace != ws {
		t.Fatalf("view of a write: %+v", j)
	}
	r := g.Evaluate(ctx, Request{Agent: "a", Tool: "read", Known: true, Kind: KindRead, Workspace: ws, Arguments: map[string]any{"path": "notes.txt"}})
	if r.Action != Deny || r.Judged.Links[link] != filepath.Join(ws, "server.pem") {
		t.Fatalf("read through a link: %s, view %+v", r.Action, r.Judged)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if again := g.Rejudge(ctx, "a", "read", r.Judged); again.Action != Deny || again.Rule != r.Rule {
		t.Fatalf("judged again without the link: %s by %s, want deny by %s", again.Action, again.Rule, r.Rule)
	}
}
