package test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/toolctl"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// TestAgentCannotChangeItsPolicy follows the README's layout: the policy
// file lives in the configuration directory, outside the workspace, and
// the worker follows it. The agent tries to rewrite it through every
// tool that writes — edit, write, bash, and a symbolic link it plants in
// the workspace — under the README's policy (the built-in one) and under
// one that lets every command run without a person, so
// that what holds is the containment, not the gate's verdict. The policy
// file's bytes never change.
func TestAgentCannotChangeItsPolicy(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	var builtin bytes.Buffer
	if code := toolctl.Run(context.Background(), []string{"policy", "default"}, &builtin, os.Stderr); code != toolctl.ExitOK {
		t.Fatalf("toolctl policy default: exit %d", code)
	}
	for name, doc := range map[string]string{"readme": builtin.String(), "runs everything": runsEverything} {
		t.Run(name, func(t *testing.T) {
			ws := newWorkspace(t)
			pol := filepath.Join(stateTempDir(t), "config", "toolgate", "policy.yaml")
			writeFile(t, pol, doc)
			p := startProcess(t, ws, func(o *daemon.Options) { o.PolicyFile, o.Sandbox = pol, bash.ModeRequire })
			c := p.client(t, "agent-l")
			if err := os.Symlink(pol, filepath.Join(ws, "policy.yaml")); err != nil {
				t.Fatal(err)
			}
			attempts := []struct {
				tool string
				args map[string]any
			}{
				{"edit", map[string]any{"path": pol, "old_string": "version: 1", "new_string": "default: allow"}},
				{"write", map[string]any{"path": pol, "content": "default: allow\n"}},
				{"edit", map[string]any{"path": "policy.yaml", "old_string": "version: 1", "new_string": "default: allow"}},
				{"write", map[string]any{"path": "policy.yaml", "content": "default: allow\n"}},
				{"write", map[string]any{"path": "../" + filepath.Base(ws) + "/../x/" + pol, "content": "default: allow\n"}},
				{"bash", map[string]any{"command": "sed -i 's/version: 1/default: allow/' " + pol}},
				{"bash", map[string]any{"command": "echo 'default: allow' > policy.yaml"}},
				{"bash", map[string]any{"command": "printf 'default: allow\\n' >> " + pol}},
				{"bash", map[string]any{"command": "cp /dev/null " + pol}},
				// Paths the gate cannot see: the sandbox must hold.
				{"bash", map[string]any{"command": "p=$(printf %s " + filepath.Dir(pol) + "); : > \"$p/policy.yaml\""}},
				{"bash", map[string]any{"command": "python3 -c \"open('" + pol + "', 'w').write('default: allow')\""}},
				{"bash", map[string]any{"command": "find " + filepath.Dir(pol) + " -name policy.yaml -exec truncate -s0 {} +"}},
				{"write", map[string]any{"path": "attack.sh", "content": ": > " + pol + "\n"}},
				{"bash", map[string]any{"command": "sh attack.sh"}},
			}
			for _, a := range attempts {
				r := attempt(t, c, a.tool, a.args)
				if r != nil {
					t.Logf("%s %v: %s %.200s", a.tool, a.args, r.Status, r.Output)
				}
				if got, _ := os.ReadFile(pol); string(got) != doc {
					t.Fatalf("%s %v changed the policy file to:\n%s", a.tool, a.args, got)
				}
			}
		})
	}
}

// runsEverything lets every command run without a person, wherever its
// paths point: what holds is the sandbox (a read-only root, the
// workspace the only writable place) and the file tools' roots.
const runsEverything = `version: 1
default: allow
exec:
  security: full
  ask: off
  confirm_dangerous: false
tools:
  write: allow
  edit: allow
  bash: allow
`

// attempt makes one call and returns its result; a call parked for a
// person is withdrawn (no one approves an agent's attack) and nil is
// returned.
func attempt(t *testing.T, c *client.Client, tool string, args map[string]any) *events.ResultData {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var parked atomic.Bool
	res, err := c.Call(ctx, tool, args, client.OnPending(func(events.ResultData) { parked.Store(true); cancel() }))
	if parked.Load() {
		t.Logf("%s %v: parked for a person, withdrawn", tool, args)
		return nil
	}
	if err != nil {
		t.Fatalf("%s %v: %v", tool, args, err)
	}
	return res
}
