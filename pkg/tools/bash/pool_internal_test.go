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

// TestPrepareWritesNothing: a call judged to write only the files it
// names gets each missing one created empty, so that exactly that name
// is writable. A sandbox prepared for the next such call is made after
// the call, when the file may be gone again (another call removed it):
// it creates nothing in the workspace.
func TestPrepareWritesNothing(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	ws := ownedWorkspace(t)
	b, err := newBash(Config{Workspace: ws, Sandbox: ModeRequire, Prepared: true})
	if err != nil {
		t.Fatal(err)
	}
	if b.pool == nil {
		t.Skip("no sandboxes are prepared here (no first program)")
	}
	defer b.pool.close()
	pol, _, err := policy.Parse([]byte("version: 1\ndefault: ask\ntools:\n  write: allow\n  bash: allow\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	command := "echo x > out.txt"
	d := policy.NewGate(pol).Evaluate(context.Background(), policy.Request{Tool: "bash", Known: true, Kind: policy.KindExecute,
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
