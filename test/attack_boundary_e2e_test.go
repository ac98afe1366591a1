package test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/toolctl"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// The boundary: the gate's judgement of an allowed bash call is a set of
// capabilities, and the kernel grants the call that set and nothing else.
// These attacks use what bash does while it runs, which the gate predicts
// and may mispredict (variables assigned inside expansions, the dynamic
// loader); each is sent through a real worker with bubblewrap, and what
// must hold is that its effect never happens, whatever the gate said: a
// secret outside the view or denied inside it is never printed, a
// protected file never changes, a program the agent wrote never runs.

// boundaryPolicy is permissivePolicy denying the reading of *.pem
// files, as seed 000 does.
var boundaryPolicy = strings.Replace(permissivePolicy, "  read: allow\n", "  read: { action: allow, constraints: { denied_paths: [\"**/*.pem\"] } }\n", 1)

// boundarySecret is what the secret files of these attacks hold.
const boundarySecret = "BOUNDARY31-c0ffee"

// boundaryOutside makes a directory outside the workspace, readable by
// anyone, in a place of the host the sandbox used to show (its whole root,
// read-only), holding rtdir/secret.
func boundaryOutside(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "toolgate-boundary-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "rtdir", "secret"), boundarySecret+"\n")
	return dir
}

// heldOrRan sends command and returns its output; a call the gate parks
// or denies is held by the gate, which these tests also accept: what they
// assert is the effect.
func heldOrRan(t *testing.T, c *client.Client, command string) string {
	t.Helper()
	r := send(t, c, command)
	if r.Status == events.StatusPending || r.Status == events.StatusDenied {
		t.Logf("%s: held by the gate (%s)", command, r.Status)
	}
	return r.Output
}

func TestAttackBoundaryReadsOutsideTheView(t *testing.T) {
	testenv.LookPath(t, "bash", "bash")
	outside := boundaryOutside(t)
	p, c := attackWorker(t, boundaryPolicy)
	ws := p.ws
	writeFile(t, filepath.Join(ws, "rtdir", "notes"), "notes\n")
	writeFile(t, filepath.Join(ws, "keys", "rtdir", "server.pem"), boundarySecret+"\n")
	for _, command := range []string{
		// CDPATH assigned inside an expansion: the gate judges cd rtdir
		// in the workspace, bash enters the directory outside it.
		"x=${CDPATH:=" + outside + "}; cd rtdir && cat secret",
		"[[ ${CDPATH:=" + outside + "} ]]; cd rtdir && cat secret",
		// The same into a directory of the workspace that holds a file
		// the policy denies: the tree the gate judged holds notes.
		"x=${CDPATH:=" + ws + "/keys}; cd rtdir && grep -r . .",
	} {
		out := heldOrRan(t, c, command)
		if strings.Contains(out, boundarySecret) {
			t.Errorf("%s printed the secret:\n%s", command, out)
		}
	}
}

func TestAttackBoundaryWritesTheRepositoryConfig(t *testing.T) {
	testenv.LookPath(t, "git", "git")
	p, c := attackWorker(t, boundaryPolicy)
	ws := p.ws
	hostGit(t, ws, "init", "-q", ".")
	writeFile(t, filepath.Join(ws, "f.txt"), "one\n")
	config, err := os.ReadFile(filepath.Join(ws, ".git", "config"))
	if err != nil {
		t.Fatal(err)
	}
	for _, command := range []string{
		// With CDPATH at the repository, cd hooks/.. enters .git, and the
		// gate judged a write to ./config of the workspace.
		"x=${CDPATH:=" + ws + "/.git}; cd hooks/.. && printf '[core]\\n\\tfsmonitor = touch m31f\\n' >> config",
		"x=${CDPATH:=" + ws + "/.git}; cd hooks/.. && cat /dev/null > hooks/post-checkout",
	} {
		heldOrRan(t, c, command)
		if got, _ := os.ReadFile(filepath.Join(ws, ".git", "config")); string(got) != string(config) {
			t.Fatalf("%s changed .git/config:\n%s", command, got)
		}
	}
	if _, err := os.Lstat(filepath.Join(ws, ".git", "hooks", "post-checkout")); err == nil {
		t.Fatal("a hook was planted")
	}
	// A person's next git status runs nothing the agent wrote.
	cmd := exec.Command("git", "status", "--short")
	cmd.Dir = ws
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	_, _ = cmd.CombinedOutput()
	noMarker(t, ws, "m31f", "git status after the attack")
}

func TestAttackBoundaryDynamicLoader(t *testing.T) {
	ldso, err := exec.LookPath("ld.so")
	if err != nil {
		t.Skip("no ld.so in PATH on this machine: the gate cannot be asked to run the loader by name")
	}
	touch, err := exec.LookPath("touch")
	if err != nil {
		t.Fatal(err)
	}
	elf, err := os.ReadFile(touch)
	if err != nil {
		t.Fatal(err)
	}
	p, c := attackWorker(t, boundaryPolicy)
	ws := p.ws
	// The agent wrote a program into the workspace (through the write
	// tool, say): a copy of touch, not executable.
	if err := os.WriteFile(filepath.Join(ws, "evil"), elf, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, command := range []string{
		// The loader is a system program the gate resolves; the file it
		// maps is the agent's.
		filepath.Base(ldso) + " ./evil m31l",
		"cat evil > copy && " + filepath.Base(ldso) + " ./copy m31l",
	} {
		heldOrRan(t, c, command)
		noMarker(t, ws, "m31l", command)
	}
}

// TestBoundaryIsAudited: each bash call's execution audit event says what
// the kernel granted it: a call naming no program ran the shell alone,
// with the workspace read-only; a call running a program that runs
// programs (the documented exception) ran unrestricted, and its audit
// says so and why.
func TestBoundaryIsAudited(t *testing.T) {
	testenv.LookPath(t, "make", "make")
	p, c := attackWorker(t, boundaryPolicy)
	writeFile(t, filepath.Join(p.ws, "notes.txt"), "notes\n")
	for _, tt := range []struct {
		command, exec, write string
	}{
		{command: "cd . && echo in", exec: "restricted to the programs the gate resolved", write: "none"},
		{command: "make --version", exec: "unrestricted: make runs programs", write: "workspace"},
	} {
		r := send(t, c, tt.command)
		if r.Status != events.StatusOK {
			t.Fatalf("%s: %s %s", tt.command, r.Status, r.Output)
		}
		var got *events.Confinement
		for range 50 { // the audit event is stored right after the result
			out, errOut, code := p.toolctl(t, "audit", "--agent", "attacker", "--json")
			if code != 0 {
				t.Fatalf("toolctl audit: %d %s", code, errOut)
			}
			for _, line := range strings.Split(out, "\n") {
				var l toolctl.AuditLine
				if json.Unmarshal([]byte(line), &l) == nil && l.Data.CallID == r.CallID && l.Data.Kind == events.AuditExecution {
					got = l.Data.Confinement
				}
			}
			if got != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if got == nil || !strings.HasPrefix(got.Exec, tt.exec) || got.Write != tt.write {
			t.Errorf("%s: audited confinement %+v, want exec %q…, write %q", tt.command, got, tt.exec, tt.write)
		}
	}
}
