package policy

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestZZProbe(t *testing.T) {
	f := os.Getenv("PROBE")
	if f == "" {
		t.Skip()
	}
	data, _ := os.ReadFile(f)
	ws, _ := fixture(t)
	gs := map[string]*Gate{"seed": NewGate(loadPolicy(t, "testdata/seed000.yaml")), "builtin": NewGate(Default())}
	for _, l := range strings.Split(string(data), "\n") {
		if l == "" {
			continue
		}
		for _, n := range []string{"seed", "builtin"} {
			d := gs[n].Evaluate(context.Background(), Request{Agent: "a", Tool: "run_shell", Known: true, Kind: KindExecute, Arguments: map[string]any{"command": l}, Workspace: ws})
			fmt.Printf("%-7s %-5s %-40s %s | %s | [%s]\n", n, d.Action, l, d.Rule, d.Reason, d.Offending)
		}
	}
}
