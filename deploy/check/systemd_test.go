package check

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/deploy/check/internal/need"
)

var units = []string{"toolgate-worker.service", "toolgate-approver.service"}

// verify runs systemd-analyze verify on units (their ExecStart pointed at
// programs that exist here) and returns what it said about them.
func verify(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	sa := need.Program(t, "systemd-analyze", "systemd")
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for name, body := range files {
		for _, prog := range []string{"worker", "approver"} {
			if err := os.WriteFile(filepath.Join(bin, prog), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		body = strings.ReplaceAll(body, "/usr/local/bin/", bin+"/")
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	out, err := exec.Command(sa, append([]string{"verify"}, paths...)...).CombinedOutput()
	var about []string
	for _, l := range strings.Split(string(out), "\n") {
		for name := range files {
			if strings.Contains(l, name) {
				about = append(about, l)
			}
		}
	}
	if err != nil {
		about = append(about, "systemd-analyze: "+err.Error())
	}
	return strings.Join(about, "\n")
}

func readUnit(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../systemd", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSystemdUnits: systemd-analyze verify finds nothing to say about the
// units, and they keep their hardening, the worker's minus exactly what
// bubblewrap needs (explained in the unit).
func TestSystemdUnits(t *testing.T) {
	files := map[string]string{}
	for _, u := range units {
		files[u] = readUnit(t, u)
	}
	if msg := verify(t, t.TempDir(), files); msg != "" {
		t.Fatalf("systemd-analyze verify:\n%s", msg)
	}
	common := []string{"ProtectSystem=strict", "NoNewPrivileges=yes", "StateDirectory=toolgate", "PrivateTmp=yes",
		"PrivateDevices=yes", "ProtectHome=yes", "CapabilityBoundingSet=\n", "User=toolgate", "LoadCredential="}
	for _, u := range units {
		for _, d := range common {
			if !strings.Contains(files[u], "\n"+d) {
				t.Errorf("%s lacks %q", u, strings.TrimSpace(d))
			}
		}
	}
	worker := files["toolgate-worker.service"]
	// Each would keep bwrap from building its sandbox (see the unit).
	for _, d := range []string{"ProtectKernelTunables=", "ProtectKernelLogs=", "ProcSubset=", "ProtectProc=",
		"PrivateUsers=", "MemoryDenyWriteExecute=", "ProtectControlGroups=", "RestrictNamespaces=yes"} {
		if strings.Contains(worker, "\n"+d) {
			t.Errorf("the worker unit sets %s, which stops bubblewrap", d)
		}
	}
	for _, d := range []string{"RestrictNamespaces=user mnt pid ipc uts net cgroup", "SystemCallFilter=@system-service @mount",
		"--sandbox require", "AF_NETLINK"} {
		if !strings.Contains(worker, d) {
			t.Errorf("the worker unit lacks %q", d)
		}
	}
	approver := files["toolgate-approver.service"]
	for _, d := range []string{"ProtectKernelTunables=yes", "RestrictNamespaces=yes", "MemoryDenyWriteExecute=yes", "PrivateUsers=yes"} {
		if !strings.Contains(approver, "\n"+d) {
			t.Errorf("the approver unit lacks %q", d)
		}
	}
}

// TestSystemdVerifyBites: the check above is worth something only if
// systemd-analyze reports a misspelt directive and a bad value.
func TestSystemdVerifyBites(t *testing.T) {
	bad := strings.Replace(readUnit(t, "toolgate-worker.service"), "ProtectSystem=strict", "ProtectSytem=strict\nRestart=sometimes", 1)
	msg := verify(t, t.TempDir(), map[string]string{"toolgate-worker.service": bad})
	if !strings.Contains(msg, "ProtectSytem") || !strings.Contains(msg, "sometimes") {
		t.Fatalf("systemd-analyze verify let a misspelt directive and a bad value through: %q", msg)
	}
}
