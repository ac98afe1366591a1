package policyreplay

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// trail is a small audit trail: gate decisions, people's decisions, an
// execution folding the gate's decision, a call audited before the
// gate's view existed and one whose view held a secret.
func trail(ws string) []events.AuditData {
	gate := func(id, agent, tool, action, rule string, at time.Duration, j *events.Judged) events.AuditData {
		return events.AuditData{Kind: events.AuditDecision, CallID: id, Agent: agent, Tool: tool, DecidedBy: []string{"policy"},
			Decision: &events.Decision{Action: action, Rule: rule, Reason: "then"}, Time: t0.Add(at), Judged: j}
	}
	exec := gate("c-read", "dev-1", "read", "allow", "tools.read.action", 0, &events.Judged{Workspace: ws, Path: "README.md"})
	exec.Kind, exec.DecidedAt, exec.Time = events.AuditExecution, t0, t0.Add(time.Second)
	people := gate("c-rm", "dev-1", "bash", "approved", "", 3*time.Minute, nil)
	people.DecidedBy = []string{"alice"}
	return []events.AuditData{
		exec,
		gate("c-rm", "dev-1", "bash", "ask", "builtin.classify.dangerous", time.Minute, &events.Judged{Workspace: ws, Command: "rm -rf build"}),
		people,
		gate("c-rm", "dev-1", "bash", "ask", "builtin.classify.dangerous", 2*time.Minute, &events.Judged{Workspace: ws, Command: "rm -rf build"}), // a redelivery: counted once
		gate("c-sudo", "bot-1", "bash", "deny", "builtin.classify.forbidden", 4*time.Minute, &events.Judged{Workspace: ws, Command: "sudo id"}),
		gate("c-old", "bot-1", "read", "allow", "tools.read.action", 5*time.Minute, nil),
		gate("c-secret", "bot-1", "bash", "allow", "x", 6*time.Minute, &events.Judged{Command: "echo [REDACTED:jwt]", Redacted: true}),
		gate("c-late", "dev-1", "read", "allow", "tools.read.action", time.Hour, &events.Judged{Workspace: ws, Path: "README.md"}),
	}
}

func TestReplay(t *testing.T) {
	ws := "/srv/ws"
	p, _, err := policy.Parse([]byte("tools: {read: deny, bash: {}}\nagents:\n  bot-*:\n    default: allow\n    exec: {security: full, ask: off, confirm_dangerous: false}\n"), "next.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		opts   Options
		golden string
		sum    Summary
	}{
		{"all", Options{}, "all", Summary{Calls: 6, Judged: 4, Unchanged: 1, NotReplayable: 2}},
		{"window", Options{Since: t0.Add(30 * time.Second), Until: t0.Add(30 * time.Minute)}, "window", Summary{Calls: 4, Judged: 2, Unchanged: 1, NotReplayable: 2}},
		{"agent and tool", Options{Agent: "dev-*", Tool: "read"}, "agent", Summary{Calls: 2, Judged: 2}},
		{"empty window", Options{Until: t0.Add(-time.Hour)}, "empty", Summary{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New(p, tt.opts)
			for _, a := range trail(ws) {
				r.Add(context.Background(), &a)
			}
			res := r.Result()
			s := res.Summary
			if s.Calls != tt.sum.Calls || s.Judged != tt.sum.Judged || s.Unchanged != tt.sum.Unchanged || s.NotReplayable != tt.sum.NotReplayable {
				t.Errorf("summary %+v, want %+v", s, tt.sum)
			}
			for _, form := range []struct {
				ext    string
				render func(*bytes.Buffer) error
			}{
				{"txt", func(b *bytes.Buffer) error { return res.Text(b) }},
				{"json", func(b *bytes.Buffer) error { return res.JSON(b) }},
				{"html", func(b *bytes.Buffer) error { return res.HTML(b) }},
			} {
				var b bytes.Buffer
				if err := form.render(&b); err != nil {
					t.Fatal(err)
				}
				golden(t, filepath.Join("testdata", tt.golden+"."+form.ext), b.Bytes())
			}
		})
	}
}

func golden(t *testing.T, file string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (go test ./internal/policyreplay -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test ./internal/policyreplay -update and review):\n%s", file, got)
	}
}
