package toolctl_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/toolctl"
)

// TestCredsLogin: creds login writes the approver's token file (mode
// 0600) the approver reads; minting again for one person replaces that
// person's token and keeps the others'.
func TestCredsLogin(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	read := func() (map[string]string, *approver.Tokens) {
		t.Helper()
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := map[string]string{}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 2 && !strings.HasPrefix(l, "#") {
				lines[f[0]] = f[1]
			}
		}
		toks, err := approver.LoadTokens(file)
		if err != nil {
			t.Fatalf("the approver refuses the file: %v\n%s", err, b)
		}
		return lines, toks
	}
	if _, errOut, code := run(t, "creds", "login", "alice", "bob", "--out", file); code != toolctl.ExitOK {
		t.Fatalf("creds login: exit %d: %s", code, errOut)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, mode %v, want 0600", err, fi.Mode())
	}
	first, toks := read()
	for _, p := range []string{"alice", "bob"} {
		if id, ok := toks.Identity(first[p]); !ok || id != p {
			t.Errorf("%s's token authenticates %q, %v", p, id, ok)
		}
	}
	if _, errOut, code := run(t, "creds", "login", "bob", "--out", file); code != toolctl.ExitOK {
		t.Fatalf("creds login bob: exit %d: %s", code, errOut)
	}
	second, toks := read()
	if second["alice"] != first["alice"] || second["bob"] == first["bob"] || len(second) != 2 {
		t.Errorf("minting bob again: before %v, after %v", first, second)
	}
	if _, ok := toks.Identity(first["bob"]); ok {
		t.Error("bob's old token still logs in")
	}
	if _, errOut, code := run(t, "creds", "login", "bad name", "--out", file); code != toolctl.ExitUsage {
		t.Errorf("a name with a space: exit %d: %s", code, errOut)
	}
}
