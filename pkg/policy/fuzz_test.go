package policy

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/pkg/policy/shell"
)

// FuzzShellGate judges arbitrary command lines under a policy that allows
// every command it can know: the gate must never panic, never allow what
// the analyser failed to parse, and never allow a command with a hazard.
func FuzzShellGate(f *testing.F) {
	for _, s := range []string{"ls -la", "ls; rm -rf /", "sh -c 'ls $('", "f() { ls; }", "x=$(id) ls", "cat <<EOF\n$(id)\nEOF"} {
		f.Add(s)
	}
	ws := f.TempDir()
	p, _, err := Parse([]byte("allow: [bash]\nexec: {security: full}\n"), "fuzz")
	if err != nil {
		f.Fatal(err)
	}
	g := NewGate(p)
	f.Fuzz(func(t *testing.T, cmd string) {
		d := g.Evaluate(context.Background(), Request{Agent: "fuzz", Tool: "bash", Known: true, Kind: KindExecute,
			Arguments: map[string]any{"command": cmd}, Workspace: ws})
		if strings.HasPrefix(d.Reason, "policy evaluation failed") {
			t.Fatalf("evaluation panicked on %q: %s", cmd, d.Reason)
		}
		s, err := shell.Parse(cmd)
		if err != nil {
			if !errors.Is(err, shell.ErrSyntax) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrSyntax", cmd, err)
			}
			if strings.TrimSpace(cmd) != "" && d.Action != Deny {
				t.Fatalf("%q failed to parse (%v) but the gate said %s (%s)", cmd, err, d.Action, d.Rule)
			}
			return
		}
		if d.Action != Allow {
			return
		}
		if len(s.Hazards) > 0 {
			t.Fatalf("%q allowed despite hazard %+v", cmd, s.Hazards[0])
		}
		for _, c := range s.Commands {
			if len(c.Hazards) > 0 {
				t.Fatalf("%q allowed despite hazard %+v", cmd, c.Hazards[0])
			}
			if len(c.Args) > 0 && c.Name() == "" {
				t.Fatalf("%q allowed with a command name not known statically", cmd)
			}
		}
		for _, r := range s.Redirects {
			if !r.Target.Literal {
				t.Fatalf("%q allowed with redirection target not known statically", cmd)
			}
		}
	})
}
