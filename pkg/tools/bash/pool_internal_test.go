//go:build linux

package bash

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// preparedWithGate is a workspace, the bash tool preparing sandboxes in
// it (discarded when t ends) and a gate allowing writes and commands.
func preparedWithGate(t *testing.T) (string, *bash, policy.Evaluator) {
	t.Helper()
	testenv.LookPath(t, "bwrap", "bubblewrap")
	ws := ownedWorkspace(t)
	b, err := newBash(Config{Workspace: ws, Sandbox: ModeRequire, Prepared: true})
	if err != nil {
		t.Fatal(err)
	}
	if b.pool == nil {
		t.Skip("no sandboxes are prepared here (no first program)")
	}
	t.Cleanup(b.pool.close)
	pol, _, err := policy.Parse([]byte("version: 1\ndefault: ask\ntools:\n  write: allow\n  bash: allow\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	return ws, b, policy.NewGate(pol)
}

// TestPrepareWritesNothing: a call judged to write only the files it
// names gets each missing one created empty, so that exactly that name
// is writable. A sandbox prepared for the next such call is made after
// the call, when the file may be gone again (another call removed it):
// it creates nothing in the workspace.
func TestPrepareWritesNothing(t *testing.T) {
	ws, b, gate := preparedWithGate(t)
	command := "echo x > out.txt"
	d := gate.Evaluate(context.Background(), policy.Request{Tool: "bash", Known: true, Kind: policy.KindExecute,
		Arguments: map[string]any{"command": command}, Workspace: ws})
	if d.Action != policy.Allow || d.Access == nil || d.Access.Write != policy.WriteNamed {
		t.Fatalf("the gate's decision: %+v", d)
	}
	c := &tools.Call{Name: "bash", Arguments: json.RawMessage(`{"command":"echo x > out.txt"}`), Decision: &d}
	b.pool.fill(c, false, "the key of echo x > out.txt")
	b.pool.wg.Wait()
	if _, err := os.Lstat(filepath.Join(ws, "out.txt")); err == nil {
		t.Errorf("preparing a sandbox for %q created out.txt", command)
	}
}

// TestPrepareNothingForAViewThatChanges: calls whose views all differ (a
// new file to write each time) find nothing ready, and have nothing
// prepared for them in vain.
func TestPrepareNothingForAViewThatChanges(t *testing.T) {
	ws, b, gate := preparedWithGate(t)
	for i := range 4 {
		command := "echo x > out" + string(rune('a'+i)) + ".txt"
		d := gate.Evaluate(context.Background(), policy.Request{Tool: "bash", Known: true, Kind: policy.KindExecute,
			Arguments: map[string]any{"command": command}, Workspace: ws})
		args, _ := json.Marshal(map[string]any{"command": command})
		out, err := b.tool().Handler.Handle(context.Background(), &tools.Call{Name: "bash", Arguments: args, Decision: &d})
		if err != nil || out.IsError {
			t.Fatalf("%s: %+v %v", command, out, err)
		}
		b.pool.wg.Wait()
	}
	b.pool.mu.Lock()
	defer b.pool.mu.Unlock()
	if n := len(b.pool.ready); n != 0 || b.pool.used.Load() != 0 {
		t.Errorf("%d views have sandboxes prepared, %d calls ran in one: want none", n, b.pool.used.Load())
	}
}
