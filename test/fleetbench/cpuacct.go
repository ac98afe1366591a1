package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cpuacctRoot is the cgroup v1 cpuacct hierarchy's mount.
const cpuacctRoot = "/sys/fs/cgroup/cpuacct"

// cpuGroups count the CPU time of processes and of every descendant,
// wherever it ends up: a cgroup v1 cpuacct group per process, which
// its children join as they are forked. /proc/PID/stat's cutime and
// cstime miss most of a sandboxed call: bubblewrap's outer process does
// not reap the sandbox's first process, whose CPU time (the execute
// allowlist's re-exec, setpriv, the shell) is then added to whoever
// adopts it, not to the worker. Without a writable cpuacct hierarchy
// (not root, cgroup v2 only) the bench falls back to /proc/PID/stat.
type cpuGroups struct {
	dir string // "" when unavailable
}

func newCPUGroups() *cpuGroups {
	dir := filepath.Join(cpuacctRoot, fmt.Sprintf("toolgate-fleetbench-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return &cpuGroups{}
	}
	return &cpuGroups{dir: dir}
}

func (g *cpuGroups) available() bool { return g.dir != "" }

// add moves pid into the group of name, made if need be.
func (g *cpuGroups) add(name string, pid int) error {
	if g.dir == "" {
		return nil
	}
	d := filepath.Join(g.dir, name)
	if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	return os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
}

// usage is the CPU time of the group of name so far.
func (g *cpuGroups) usage(name string) time.Duration {
	b, err := os.ReadFile(filepath.Join(g.dir, name, "cpuacct.usage"))
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return time.Duration(v)
}

// remove removes the groups once their processes have ended.
func (g *cpuGroups) remove() {
	if g.dir == "" {
		return
	}
	ents, _ := os.ReadDir(g.dir)
	for _, e := range ents {
		if e.IsDir() {
			_ = os.Remove(filepath.Join(g.dir, e.Name()))
		}
	}
	_ = os.Remove(g.dir)
}
