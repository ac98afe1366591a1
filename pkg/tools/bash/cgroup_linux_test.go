package bash

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
)

// TestCallCgroupsDoNotCollide: several bash tools may live in one process
// (workers of a test cluster, a worker restarted in place) and workers in
// other PID namespaces may share the hierarchy with the same pid. Every
// call gets a cgroup of its own all the same: names are numbered across
// the process, and a name another worker holds is passed over.
func TestCallCgroupsDoNotCollide(t *testing.T) {
	a, reason := findCgroup()
	if a == nil {
		testenv.Missing(t, "no cgroup hierarchy this process may write ("+reason+"): the test needs a writable cgroup v2 hierarchy "+
			"(run it as root, or in a delegated cgroup: systemd-run --user --scope -p Delegate=yes go test ...)")
	}
	b, _ := findCgroup()
	var made []*callCgroup
	t.Cleanup(func() {
		for _, c := range made {
			c.remove()
		}
	})
	for range 3 {
		for _, pc := range []*cgroupParent{a, b} {
			c, err := pc.newCall(10, 0)
			if err != nil {
				t.Fatalf("two tools in one process: %v", err)
			}
			made = append(made, c)
		}
	}
	// The next names, as another worker with this pid would have made them.
	for i := 1; i <= 3; i++ {
		taken := filepath.Join(a.dir, fmt.Sprintf("%d-%d", os.Getpid(), callSeq.Load()+uint64(i)))
		if err := os.Mkdir(taken, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(taken) })
	}
	c, err := a.newCall(10, 0)
	if err != nil {
		t.Fatalf("names held by another worker: %v", err)
	}
	made = append(made, c)
}
