package testenv

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"os/user"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// envUserNS marks a test process AsRoot started in a user namespace.
const envUserNS = "TOOLGATE_TEST_USERNS"

// AsRoot lets a test that must run commands as other users (a root
// worker's configured uid) run without the machine's root. It returns true
// when the process is root already (of the machine, or of the user
// namespace AsRoot made): the test goes on. Otherwise it runs the test
// again in a new process that is root of a user namespace which maps the
// user's subordinate ids (/etc/subuid, /etc/subgid) too, reports how that
// went, and returns false: the test returns. The namespace has mounts of
// its own too, so the test may mount there (a tmpfs over a directory the
// machine's root owns) without touching the machine's; InUserNS tells it
// where it runs.
//
// That needs unshare (Debian package util-linux), newuidmap and newgidmap
// (uidmap) and subordinate ids for the user; without them the test is
// skipped saying what is missing, or fails when CI is set.
func AsRoot(t *testing.T) bool {
	t.Helper()
	if os.Geteuid() == 0 {
		return true
	}
	if InUserNS() {
		t.Fatalf("not root (uid %d) in the user namespace made for the test", os.Geteuid())
	}
	unshare := LookPath(t, "unshare", "util-linux")
	LookPath(t, "newuidmap", "uidmap")
	LookPath(t, "newgidmap", "uidmap")
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		if !hasSubordinateIDs(f, u) {
			Missing(t, "user "+u.Username+" has no subordinate ids in "+f+
				" to map other users in a user namespace: add some (usermod --add-subuids 100000-165535 --add-subgids 100000-165535 "+u.Username+"), or run the tests as root")
		}
	}
	cmd := exec.Command(unshare, "--user", "--mount", "--map-root-user", "--map-users=auto", "--map-groups=auto",
		os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envUserNS+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("run as root of a user namespace:\n%s", out)
	if err != nil {
		t.Fatalf("%s in a user namespace: %v", t.Name(), err)
	}
	if !bytes.Contains(out, []byte("--- PASS: "+t.Name()+" ")) {
		t.Fatalf("%s did not pass in a user namespace", t.Name())
	}
	return false
}

// InUserNS reports whether the test runs in the user (and mount)
// namespace AsRoot made for it.
func InUserNS() bool { return os.Getenv(envUserNS) != "" }

// hasSubordinateIDs reports whether file (/etc/subuid or /etc/subgid)
// gives u a range of ids.
func hasSubordinateIDs(file string, u *user.User) bool {
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(fields) != 3 || (fields[0] != u.Username && fields[0] != u.Uid) {
			continue
		}
		if n, err := strconv.Atoi(fields[2]); err == nil && n > 0 {
			return true
		}
	}
	return false
}
