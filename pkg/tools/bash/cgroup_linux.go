package bash

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A per-call cgroup bounds how many processes (and threads) one call holds
// at once with pids.max: RLIMIT_NPROC cannot, since the kernel counts it
// per user across the machine and ignores it for root. The worker makes a
// "toolgate" cgroup under its own and one child per call, in the cgroup v2
// hierarchy when the pids controller is delegated to it, else in the v1
// pids hierarchy when it may write there (root on a v1 or hybrid host).

// cgroupParent is where per-call cgroups are made, found at New.
type cgroupParent struct {
	dir string // the "toolgate" cgroup
	v2  bool
	// mounts are the hierarchies' mounts, read once (callCgroup.startIn).
	mounts map[string]cgroupMount
	// memory: the call cgroups bound memory too: in dir (v2), or in
	// memDir, the "toolgate" cgroup of the v1 memory hierarchy.
	memory bool
	memDir string
}

// callSeq numbers call cgroups across the process: several bash tools may
// share one (the workers of a test cluster, a worker restarted in place).
var callSeq atomic.Uint64

// maxTakenNames bounds how many names in a row newCall passes over
// because another worker holds them.
const maxTakenNames = 64

// callCgroup is one call's cgroup (and, on v1, its memory cgroup).
type callCgroup struct {
	dir    string
	memDir string
	v2     bool
	mounts map[string]cgroupMount
	// max is the pids limit startIn sets once its thread has left (v1).
	max int
	// spare is a process never killed for the call (a sandbox template
	// whose thread starts the call from inside its cgroups); 0: none.
	spare int
}

// findCgroup finds or makes the worker's "toolgate" cgroup in a hierarchy
// with the pids controller it may write; reason says why there is none.
func findCgroup() (*cgroupParent, string) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, "cannot read /proc/self/cgroup: " + err.Error()
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, "cannot read /proc/self/mountinfo: " + err.Error()
	}
	var reasons []string
	// cgroup v2 first: line "0::/path".
	for _, line := range strings.Split(string(self), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			if m, ok := mounts["cgroup2"]; ok {
				dir := m.path(p)
				if pc, err := makeParent(dir, true); err == nil {
					pc.findMemory(dir, "", cgroupMount{})
					return pc, ""
				} else {
					reasons = append(reasons, "cgroup v2: "+err.Error())
				}
			}
		}
	}
	for _, line := range strings.Split(string(self), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !hasField(parts[1], "pids") {
			continue
		}
		m, ok := mounts["pids"]
		if !ok {
			continue
		}
		if pc, err := makeParent(m.path(parts[2]), false); err == nil {
			pc.mounts = mounts
			pc.findMemory("", string(self), mounts["memory"])
			return pc, ""
		} else {
			reasons = append(reasons, "cgroup v1 pids: "+err.Error())
		}
	}
	if len(reasons) == 0 {
		reasons = append(reasons, "no cgroup hierarchy with the pids controller is mounted")
	}
	return nil, strings.Join(reasons, "; ")
}

func hasField(list, f string) bool {
	for _, x := range strings.Split(list, ",") {
		if x == f {
			return true
		}
	}
	return false
}

// cgroupMount is where a cgroup hierarchy is mounted and which of its
// paths the mount shows.
type cgroupMount struct{ root, point string }

// path is the directory of the cgroup p (as /proc/self/cgroup names it).
func (m cgroupMount) path(p string) string {
	rel := p
	if m.root != "/" {
		rel = strings.TrimPrefix(p, m.root)
	}
	return filepath.Join(m.point, rel)
}

// cgroupMounts maps "cgroup2" and each v1 controller to its mount.
func cgroupMounts() (map[string]cgroupMount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]cgroupMount{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 3 {
			continue
		}
		m := cgroupMount{root: a[3], point: a[4]}
		switch b[0] {
		case "cgroup2":
			if _, ok := out["cgroup2"]; !ok {
				out["cgroup2"] = m
			}
		case "cgroup":
			for _, opt := range strings.Split(b[2], ",") {
				if _, ok := out[opt]; !ok {
					out[opt] = m
				}
			}
		}
	}
	return out, sc.Err()
}

// findMemory finds whether call cgroups can bound memory: on v2 (dir is
// the worker's cgroup) when the memory controller can be enabled below
// it, on v1 (self is /proc/self/cgroup) when the memory hierarchy is
// writable. Memory stays unbounded by cgroups otherwise (RLIMIT_AS still
// bounds each process).
func (pc *cgroupParent) findMemory(dir, self string, m cgroupMount) {
	if pc.v2 {
		_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory"), 0)
		_ = os.WriteFile(filepath.Join(pc.dir, "cgroup.subtree_control"), []byte("+memory"), 0)
		pc.memory = true
		probe, err := pc.newCall(1, 64<<20)
		if err != nil {
			pc.memory = false
			return
		}
		_, err = os.Stat(filepath.Join(probe.dir, "memory.max"))
		probe.remove()
		pc.memory = err == nil
		return
	}
	if m.point == "" {
		return
	}
	for _, line := range strings.Split(self, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !hasField(parts[1], "memory") {
			continue
		}
		memDir := filepath.Join(m.path(parts[2]), "toolgate")
		if err := os.Mkdir(memDir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return
		}
		removeStale(memDir)
		pc.memory, pc.memDir = true, memDir
		probe, err := pc.newCall(1, 64<<20)
		if err != nil {
			pc.memory, pc.memDir = false, ""
			return
		}
		probe.remove()
		return
	}
}

// makeParent makes (or reuses) dir/toolgate and checks that a child of it
// gets pids.max.
func makeParent(dir string, v2 bool) (*cgroupParent, error) {
	if v2 {
		// The controller must be enabled on the way down; where the
		// worker's own cgroup holds processes the kernel refuses, and
		// the probe below finds out.
		_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+pids"), 0)
	}
	parent := filepath.Join(dir, "toolgate")
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	if v2 {
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil {
			return nil, fmt.Errorf("enable pids in %s: %w", parent, err)
		}
	}
	pc := &cgroupParent{dir: parent, v2: v2}
	removeStale(parent)
	probe, err := pc.newCall(1, 0)
	if err != nil {
		return nil, err
	}
	probe.remove()
	return pc, nil
}

// removeStale removes the empty call cgroups of workers that are gone
// (named <pid>-<n> after the worker's pid). One that still holds
// processes is left alone: another worker sharing the hierarchy from
// another PID namespace may own it.
func removeStale(parent string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, _, ok := strings.Cut(e.Name(), "-")
		if !e.IsDir() || !ok {
			continue
		}
		n, err := strconv.Atoi(pid)
		if err != nil || n == os.Getpid() {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue // that worker still runs
		}
		dir := filepath.Join(parent, e.Name())
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err != nil || len(strings.TrimSpace(string(b))) > 0 {
			continue
		}
		_ = os.Remove(dir)
	}
}

// newCall makes a call's cgroup holding at most max processes and, when
// mem > 0 and the parent can, mem bytes of memory.
// Names are <pid>-<n>; a name that exists belongs to another worker with
// the same pid in another PID namespace sharing the hierarchy, and is
// passed over.
func (pc *cgroupParent) newCall(max int, mem int64) (*callCgroup, error) {
	for range maxTakenNames {
		c, err := pc.makeCall(strconv.Itoa(os.Getpid())+"-"+strconv.FormatUint(callSeq.Add(1), 10), max, mem)
		if !errors.Is(err, os.ErrExist) {
			return c, err
		}
	}
	return nil, fmt.Errorf("make cgroup: %d names in a row under %s are taken", maxTakenNames, pc.dir)
}

// makeCall makes the call cgroup name; an error wraps os.ErrExist when
// the name is taken.
func (pc *cgroupParent) makeCall(name string, max int, mem int64) (*callCgroup, error) {
	dir := filepath.Join(pc.dir, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("make cgroup: %w", err)
	}
	c := &callCgroup{dir: dir, v2: pc.v2, mounts: pc.mounts}
	limit := max
	if !pc.v2 {
		// Room for the thread that starts the command (startIn), which
		// lowers the limit to max once it has left.
		c.max, limit = max, max+1
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(limit)), 0); err != nil {
		c.remove()
		return nil, fmt.Errorf("set pids.max in %s: %w", dir, err)
	}
	if mem <= 0 || !pc.memory {
		return c, nil
	}
	memLimit := filepath.Join(dir, "memory.max")
	if !pc.v2 {
		c.memDir = filepath.Join(pc.memDir, name)
		if err := os.Mkdir(c.memDir, 0o755); err != nil {
			c.memDir = ""
			c.remove()
			return nil, fmt.Errorf("make memory cgroup: %w", err)
		}
		memLimit = filepath.Join(c.memDir, "memory.limit_in_bytes")
	}
	if err := os.WriteFile(memLimit, []byte(strconv.FormatInt(mem, 10)), 0); err != nil {
		c.remove()
		return nil, fmt.Errorf("set %s: %w", memLimit, err)
	}
	return c, nil
}

// tasks are the v1 files a thread writes 0 to to move itself, alone, into
// the cgroup: the pids one and the memory one.
func (c *callCgroup) tasks() []string {
	out := []string{filepath.Join(c.dir, "tasks")}
	if c.memDir != "" {
		out = append(out, filepath.Join(c.memDir, "tasks"))
	}
	return out
}

// errCgroup marks the errors of moving into or out of a call's cgroups
// (not the command's start).
var errCgroup = errors.New("per-call cgroup")

// startIn starts cmd in the call's v1 cgroups from birth. Moving a
// process into a v1 cgroup (cgroup.procs) takes the kernel's global
// thread-group lock, whose first taking after a quiet moment waits for an
// RCU grace period (5-10 ms on a 2-core machine); a thread moving itself
// (0 written to tasks) does not take it. So a thread of its own moves
// itself into the call's cgroups, forks the command there (the child
// inherits them: cgroup v1's equivalent of v2's CLONE_INTO_CGROUP), and
// moves back to where it was before it is given back to the runtime.
//
// That thread is never the process's first one: the v1 memory controller
// charges a process's memory to its first thread's cgroup, so the
// worker's own memory would be charged to the call meanwhile. While it is
// in, the thread counts against the call's pids.max (makeCall leaves
// room for it; startIn lowers the limit afterwards). If it cannot move
// back, the command is killed and the thread, never unlocked, ends with
// its goroutine (remove never kills the worker for it).
func (c *callCgroup) startIn(cmd *exec.Cmd) error {
	err := c.startOnThread(cmd)
	if err == nil {
		err = c.lower()
	}
	if err != nil && cmd.Process != nil && cmd.ProcessState == nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	return err
}

// startOnThread runs startHere on a locked thread of its own that is not
// the process's first.
func (c *callCgroup) startOnThread(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// Held here, the first thread cannot run the goroutine
			// started in this one's place.
			defer runtime.UnlockOSThread()
			errc <- c.startOnThread(cmd)
			return
		}
		err := c.startHere(cmd)
		if !errors.Is(err, errStranded) {
			runtime.UnlockOSThread()
		} // else the thread ends with the goroutine
		errc <- err
	}()
	return <-errc
}

// errStranded says the starting thread could not move back out of the
// call's cgroups.
var errStranded = errors.New("the starting thread cannot leave the call's cgroups")

// startHere is startIn on the locked thread it runs on.
func (c *callCgroup) startHere(cmd *exec.Cmd) error {
	home, err := threadTasks(c.tasks(), c.mounts)
	if err != nil {
		return fmt.Errorf("%w: %w", errCgroup, err)
	}
	moved := 0
	for _, f := range c.tasks() {
		if err = os.WriteFile(f, []byte("0"), 0); err != nil {
			err = fmt.Errorf("%w: join %s: %w", errCgroup, f, err)
			break
		}
		moved++
	}
	if err == nil {
		err = cmd.Start()
	}
	for _, f := range home[:moved] {
		if backErr := os.WriteFile(f, []byte("0"), 0); backErr != nil {
			return fmt.Errorf("%w: %w: return to %s: %w", errCgroup, errStranded, f, backErr)
		}
	}
	return err
}

// threadTasks are the tasks files of the cgroups the calling thread is in,
// in the hierarchies of the tasks files like (each a cgroup's tasks under
// the mount of its hierarchy; mounts as cgroupMounts read them), in the
// same order.
func threadTasks(like []string, mounts map[string]cgroupMount) ([]string, error) {
	b, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(like))
	for _, f := range like {
		var found string
		for _, line := range strings.Split(string(b), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 || parts[1] == "" {
				continue
			}
			for _, ctrl := range strings.Split(parts[1], ",") {
				m, ok := mounts[ctrl]
				if ok && m.point != "" && strings.HasPrefix(f, m.point+"/") {
					found = filepath.Join(m.path(parts[2]), "tasks")
				}
			}
		}
		if found == "" {
			return nil, fmt.Errorf("no cgroup of this thread in the hierarchy of %s", f)
		}
		out = append(out, found)
	}
	return out, nil
}

// open opens the cgroup's directory for clone3's CLONE_INTO_CGROUP.
func (c *callCgroup) open() (*os.File, error) { return os.Open(c.dir) }

// peak is the most processes the cgroup held at once, or -1 when the
// kernel does not say.
func (c *callCgroup) peak() int {
	b, err := os.ReadFile(filepath.Join(c.dir, "pids.peak"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

// remove kills whatever is left in the cgroup (a process that left the
// call's process group) and removes it and its memory cgroup. The
// worker's own pid is never killed: it is listed while a starting thread
// that could not move back (startIn) has yet to end.
func (c *callCgroup) remove() {
	defer func() {
		if c.memDir != "" {
			removeCgroupDir(c.memDir)
		}
	}()
	c.kill()
	removeCgroupDir(c.dir)
}

// kill kills every process in the cgroup, but the worker and c.spare,
// until none is left.
func (c *callCgroup) kill() {
	self, spare := strconv.Itoa(os.Getpid()), strconv.Itoa(c.spare)
	for range 200 {
		if c.v2 {
			_ = os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0)
		}
		b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
		if err != nil {
			return
		}
		left := slices.DeleteFunc(strings.Fields(string(b)), func(s string) bool { return s == self || s == spare })
		if len(left) == 0 {
			return
		}
		for _, s := range left {
			if pid, err := strconv.Atoi(s); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// removeCgroupDir removes an emptied cgroup, waiting a little for zombies
// still being reaped.
func removeCgroupDir(dir string) {
	for range 200 {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
