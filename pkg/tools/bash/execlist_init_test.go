//go:build linux

package bash_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// TestSandboxInitChosen: the small first program is used only when it is
// safely installed and its probe shows it leaves the identity a call must
// run with; otherwise restricted calls start with this binary. A program
// that restricts in appearance (it fails false with 126, as the kernel's
// refusal would) but does not drop root is caught by the identity probe.
func TestSandboxInitChosen(t *testing.T) {
	needLandlock(t)
	if os.Geteuid() != 0 {
		t.Skip("the identity probed is a dropped root's")
	}
	small := buildSandboxInit(t)
	self := testBinary(t)
	// place puts a copy of src (mode perm) in a fresh directory of mode
	// dirPerm and returns its path.
	place := func(t *testing.T, src []byte, perm, dirPerm os.FileMode) string {
		dir := t.TempDir()
		p := filepath.Join(dir, "toolgate-sandbox-init")
		if err := os.WriteFile(p, src, perm); err != nil {
			t.Fatal(err)
		}
		// Chmod: the umask does not narrow these.
		if err := os.Chmod(p, perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, dirPerm); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cat, err := exec.LookPath("cat")
	if err == nil {
		cat, err = filepath.EvalSymlinks(cat)
	}
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(small)
	if err != nil {
		t.Fatal(err)
	}
	smallBin, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	// A first program that runs its command as it is, root with the
	// capabilities bwrap left, and answers the probe of a program outside
	// the allowlist as the restriction would.
	noDrop := []byte(`#!/bin/sh
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do shift; done
shift
case "$1" in false|*/false) exit 126 ;; esac
exec "$@"
`)
	for _, tt := range []struct {
		name  string
		path  func(t *testing.T) string
		small bool   // setupInit must choose it
		why   string // in the warning that says why not
	}{
		{"installed", func(t *testing.T) string { return place(t, smallBin, 0o755, 0o755) }, true, ""},
		{"missing", func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") }, false, ""},
		{"writable by others", func(t *testing.T) string { return place(t, smallBin, 0o757, 0o755) }, false, "writable by group or others"},
		{"writable by its group", func(t *testing.T) string { return place(t, smallBin, 0o775, 0o755) }, false, "writable by group or others"},
		{"in a directory others may write", func(t *testing.T) string { return place(t, smallBin, 0o755, 0o777) }, false, "its directory is writable"},
		{"owned by another user", func(t *testing.T) string {
			p := place(t, smallBin, 0o755, 0o755)
			if err := os.Chown(p, testUID, testUID); err != nil {
				t.Fatal(err)
			}
			return p
		}, false, "owned by uid 4242"},
		{"a symbolic link", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "toolgate-sandbox-init")
			if err := os.Symlink(small, p); err != nil {
				t.Fatal(err)
			}
			return p
		}, false, "not a regular file"},
		{"not dropping root", func(t *testing.T) string { return place(t, noDrop, 0o755, 0o755) }, false, "wrong identity"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.path(t)
			old := bash.SetSandboxInit(p)
			defer bash.SetSandboxInit(old)
			want := self
			if tt.small {
				want = p
			}
			ws := newWorkspace(t, testUID)
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			tool, init, err := bash.NewWithInit(bash.Config{Workspace: ws, Sandbox: bash.ModeRequire, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			if init != want {
				t.Fatalf("restricted calls start with %q, want %q\n%s", init, want, logs.String())
			}
			if !strings.Contains(logs.String(), tt.why) {
				t.Fatalf("the warnings do not say %q:\n%s", tt.why, logs.String())
			}
			// The effect: a restricted call runs as the workspace's owner
			// without capabilities (through the planted program, it ran as
			// root with what bwrap left).
			reg := tools.NewRegistry()
			if err := reg.Register(tool); err != nil {
				t.Fatal(err)
			}
			gate := policy.EvaluatorFunc(func(context.Context, policy.Request) policy.Decision {
				return policy.Decision{Action: policy.Allow, Rule: "test", Rendered: true, Command: "cat /proc/self/status", Programs: []string{cat}}
			})
			out, err := run(context.Background(), t, tools.NewPipeline(reg, tools.WithWorkspace(ws), tools.WithGate(gate)), map[string]any{"command": "cat /proc/self/status"})
			if err != nil {
				t.Fatal(err)
			}
			status := md[string](t, out, "stdout")
			for _, line := range []string{fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d", testUID, testUID, testUID, testUID), "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1"} {
				if !strings.Contains(status, line+"\n") {
					t.Errorf("a restricted call's status lacks %q:\n%s", line, status)
				}
			}
		})
	}
}
