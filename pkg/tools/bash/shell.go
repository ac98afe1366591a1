// Package bash is toolgate's bash tool. It runs a command line with bash
// in the workspace and returns stdout, stderr and the exit code apart.
//
// Every command gets a scrubbed environment (an allowlist: PATH, LANG,
// TERM, git's neutralisation, and HOME, XDG_* and TMPDIR in a fresh
// directory of the call's own outside the workspace), resource limits (CPU seconds, file size,
// address space, open files, no core files), and its own process group,
// which is killed as a whole when the command ends, times out or is
// cancelled, so that nothing it started outlives the call. Output is
// bounded while it is read (head and tail kept per stream), so a command
// printing gigabytes leaves the worker's memory flat, and it is streamed
// to Call.Progress while the command runs.
//
// With bubblewrap (Config.Sandbox auto or require, see Detect) the
// command also runs in a sandbox that shows the policy's view of the
// host (view.go: the system's directories and /etc without its secrets,
// read-only, the policy's read roots, the workspace) and grants the
// writes the gate judged (grant.go), the workspace the only writable
// place besides a private /tmp and /dev/shm,
// fresh PID, IPC, UTS and cgroup namespaces, no network unless
// Config.NetworkAllowed grants it, all capabilities dropped, no new
// privileges, a new session, dying with the worker, and a seccomp filter
// that denies ptrace, the keyring, eBPF, mounts, new namespaces (and with
// them nested user namespaces), io_uring, perf events, personality changes
// and kernel loading (seccomp_linux.go). Where the worker can make cgroups,
// each call runs in one of its own whose pids.max bounds its processes
// (Limits.Processes), and whatever is left in it when the call ends is
// killed.
//
// When the worker runs as root, commands never hold its privileges: they
// run as Config.UID and Config.GID, by default the owner of the workspace
// when that is not root (so that they can write it). In a root-owned
// workspace (root in a container) they run as root with no capability at
// all (bounding, inheritable and ambient sets empty, no new privileges,
// no supplementary groups), so that they can write the workspace and
// files keep their owner; the sandbox then also hides /root and masks
// /etc/shadow and /etc/gshadow. Inside bubblewrap the switch is made after
// the sandbox is built, by setpriv or, for a call restricted to the
// programs the gate resolved, by the sandbox's first program
// (pkg/sandboxinit); without bubblewrap, by the kernel at exec or by
// setpriv.
package bash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/sandboxinit"
	"github.com/toolgate/toolgate/pkg/tooldef"
	"github.com/toolgate/toolgate/pkg/tools"
)

// Timeouts of the bash tool; the call's timeout argument is in ms.
const (
	DefaultTimeout = 60 * time.Second
	MaxTimeout     = 600 * time.Second
)

// Default resource limits, for the zero fields of Limits.
const (
	DefaultCPUSeconds   = 600
	DefaultFileSize     = 2 << 30 // bytes
	DefaultAddressSpace = 8 << 30 // bytes
	DefaultOpenFiles    = 1024
	DefaultProcesses    = 512
	DefaultMemory       = 8 << 30 // bytes
)

// waitDelay bounds how long exec.Cmd.Wait waits for the leader to die
// after Cancel, before it kills the leader itself.
const waitDelay = 5 * time.Second

// drainGrace bounds how long output is read after the command's process
// group is gone: only a process that left the group (setsid without a
// sandbox) can hold a pipe open that long.
var drainGrace = 2 * time.Second

// Limits are resource limits set (soft and hard, so the command cannot
// raise them) for every command. Zero means the default; a negative value
// means no limit of that kind. A limit above the worker's own hard limit
// is lowered to it. Core files are always off.
type Limits struct {
	// CPUSeconds is the CPU time of each process (RLIMIT_CPU). Zero means
	// 600.
	CPUSeconds int `yaml:"cpu_seconds,omitempty" json:"cpu_seconds,omitempty"`
	// FileSize is the largest file a command may write, in bytes
	// (RLIMIT_FSIZE). Zero means 2 GiB.
	FileSize int64 `yaml:"file_size,omitempty" json:"file_size,omitempty"`
	// AddressSpace is the virtual memory of each process, in bytes
	// (RLIMIT_AS). Zero means 8 GiB; runtimes that reserve much address
	// space (V8, the JVM) may need more or none.
	AddressSpace int64 `yaml:"address_space,omitempty" json:"address_space,omitempty"`
	// OpenFiles is the number of open files per process (RLIMIT_NOFILE).
	// Zero means 1024.
	OpenFiles int `yaml:"open_files,omitempty" json:"open_files,omitempty"`
	// Processes is the most processes and threads one call may hold at
	// once. Where the worker can make cgroups (cgroup v2 with the pids
	// controller delegated to it, or the v1 pids hierarchy writable, as
	// for root on most hosts) it is the pids.max of a cgroup of the
	// call's own; zero then means 512. An unprivileged worker without
	// cgroups gives each sandboxed call a user namespace of its own, in
	// which the kernel counts RLIMIT_NPROC for the call alone (Linux
	// 5.14 and later); zero then means 512 as well. Elsewhere only
	// RLIMIT_NPROC of the worker's user is left, counted across the
	// machine (every call shares it) and ignored for root: it is then
	// set only when configured. Negative means no limit.
	Processes int `yaml:"processes,omitempty" json:"processes,omitempty"`
	// Memory is the memory (page cache included) all processes of one
	// call may use together, in bytes: the memory.max of the call's
	// cgroup (memory.limit_in_bytes on cgroup v1) where the worker can
	// make cgroups with the memory controller; past it the kernel kills
	// the call's processes. Zero means 8 GiB; negative means none.
	Memory int64 `yaml:"memory,omitempty" json:"memory,omitempty"`
}

// Config configures the bash tool.
type Config struct {
	// Workspace is where commands start and the only directory the
	// sandbox lets them write. Required.
	Workspace string `yaml:"workspace" json:"workspace"`
	// Sandbox is auto (the default), require or off; see Detect.
	Sandbox Mode `yaml:"sandbox,omitempty" json:"sandbox,omitempty"`
	// NetworkAllowed says whether a call may use the network (when the
	// policy grants the network kind). Nil means never. Only a sandbox
	// can take the network away: with none, commands have the worker's.
	NetworkAllowed func(c *tools.Call) bool `yaml:"-" json:"-"`
	// Proxy, when set, is what a sandboxed call granted the network gets
	// instead of the worker's network: its own network namespace (only a
	// loopback interface) whose port Proxy.Port leads, through a relay,
	// to a filtering proxy that reaches the hosts the policy allows and
	// nothing else. Nil keeps the all-or-nothing network of
	// NetworkAllowed. Without a sandbox it has no effect.
	Proxy *Proxy `yaml:"-" json:"-"`
	// Limits are the resource limits of every command.
	Limits Limits `yaml:"limits,omitempty" json:"limits,omitempty"`
	// MaxOutput bounds each of stdout and stderr, and the content given to
	// the model, in characters. Zero means tools.DefaultMaxOutput.
	MaxOutput int `yaml:"max_output,omitempty" json:"max_output,omitempty"`
	// MaxProgress bounds the bytes of output one call streams to
	// Call.Progress, so that a command printing gigabytes does not flood
	// the bus. Zero means DefaultMaxProgress; negative means no bound.
	MaxProgress int64 `yaml:"max_progress,omitempty" json:"max_progress,omitempty"`
	// Shell is the path of bash. Empty means bash from PATH.
	Shell string `yaml:"shell,omitempty" json:"shell,omitempty"`
	// Env adds variables to the commands' environment. Names that look
	// like secrets (key, token, password, ...), LD_*, GIT_*, BASH_ENV and
	// the like are refused; HOME is always a fresh directory of the call.
	Env map[string]string `yaml:"env,omitempty" json:"env,omitempty"`
	// Hide lists absolute directories the sandbox covers with an empty
	// tmpfs where its view would show them (under the system's
	// directories, a read root the policy allows, PATH's directories);
	// the rest of the host is not shown anyway. Ignored without a
	// sandbox. The worker's temporary directory (per-call homes, egress
	// proxy sockets) is hidden too whenever it lies outside /tmp.
	Hide []string `yaml:"hide,omitempty" json:"hide,omitempty"`
	// UID and GID are who commands run as when the worker runs as root.
	// Zero means the owner of the workspace; in a root-owned workspace,
	// root without any capability. A GID of zero with a UID set means
	// 65534 (nobody).
	UID int `yaml:"uid,omitempty" json:"uid,omitempty"`
	GID int `yaml:"gid,omitempty" json:"gid,omitempty"`
	// Prepared says whether sandboxes are started ahead of their calls,
	// off the calls' path: two per view (the workspace's grant, the
	// network, whether execution is restricted) a call found none ready
	// for twice, for at most four views,
	// each used by one call only and discarded when its mounts changed
	// (see pool.go). A call finding none ready gets its sandbox built as
	// without. Ignored without a sandbox or without the sandbox's first
	// program (toolgate-sandbox-init).
	Prepared bool `yaml:"prepared,omitempty" json:"prepared,omitempty"`
	// NoTemplate keeps prepared sandboxes one per call even where a
	// sandbox template could serve them: by default, with Prepared, a
	// worker running as root with per-call cgroups in a v1 hierarchy
	// keeps one template per view that forks a fresh sandbox for each
	// call (template.go), without bwrap or a program's start per call.
	NoTemplate bool `yaml:"no_template,omitempty" json:"no_template,omitempty"`
	// Logger receives one debug line per command and warnings. Nil means
	// slog.Default().
	Logger *slog.Logger `yaml:"-" json:"-"`
}

// Validate names the field that is wrong.
func (c Config) Validate() error {
	if c.Workspace == "" {
		return errors.New("bash config: workspace: required")
	}
	if _, err := ParseMode(string(c.Sandbox)); err != nil {
		return fmt.Errorf("bash config: sandbox: %w", err)
	}
	if c.MaxOutput < 0 {
		return errors.New("bash config: max_output: must not be negative")
	}
	if err := c.Proxy.validate(); err != nil {
		return err
	}
	if c.UID < 0 || c.GID < 0 {
		return errors.New("bash config: uid, gid: must not be negative")
	}
	for _, h := range c.Hide {
		if !filepath.IsAbs(h) || filepath.Clean(h) == "/" {
			return fmt.Errorf("bash config: hide: %q: want an absolute directory other than /", h)
		}
	}
	for k, v := range c.Env {
		if err := checkEnvName(k); err != nil {
			return fmt.Errorf("bash config: env: %w", err)
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("bash config: env: %s: value contains a NUL byte", k)
		}
	}
	return nil
}

// bash is the tool's state, fixed at New.
type bash struct {
	ws      string
	shell   string
	sb      Sandbox
	id      identity
	env     []string
	limits  Limits
	maxOut  int
	maxProg int64
	network func(*tools.Call) bool
	proxy   *Proxy
	log     *slog.Logger
	// cg makes the per-call cgroups that bound processes; nil when the
	// worker cannot (cgReason says why).
	cg       *cgroupParent
	cgReason string
	setpriv  string // drops capabilities of root commands without a sandbox
	// gitWrapper is the script that replaces git in the sandbox
	// (gitWrapper); gitConfigs the repository's sanitised configs.
	gitWrapper []byte
	gitConfigs *gitConfigCache
	// userNS: without cgroups, an unprivileged worker's sandbox gets a
	// user namespace of its own, in which the kernel counts RLIMIT_NPROC
	// for the call alone.
	userNS bool
	// init is the program shown in the sandbox as the first program of a
	// call whose execution is restricted (pkg/sandboxinit,
	// execlist_linux.go): it drops root instead of setpriv and applies
	// the execute allowlist; "" when the machine cannot.
	init string
	// noexec: that program remounts the places a call can write noexec.
	noexec bool
	// pool holds the sandboxes prepared ahead (Config.Prepared); nil
	// when off.
	pool *pool
}

// New returns the bash tool (aliases run_shell and exec) for cfg. It
// fails when cfg is invalid, the workspace is not a directory or is /,
// bash is missing, or the sandbox mode cannot be met (Detect).
func New(cfg Config) (*tools.Tool, error) {
	b, err := newBash(cfg)
	if err != nil {
		return nil, err
	}
	return b.tool(), nil
}

// newBash is New's tool state, checked.
func newBash(cfg Config) (*bash, error) {
	if !supported {
		return nil, fmt.Errorf("bash tool: %w on %s", errors.ErrUnsupported, runtime.GOOS)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ws, err := realDir(cfg.Workspace)
	if err != nil {
		return nil, fmt.Errorf("bash config: workspace: %w", err)
	}
	if ws == "/" {
		return nil, errors.New("bash config: workspace: / cannot be the workspace: commands could write the whole filesystem")
	}
	sh := cfg.Shell
	if sh == "" {
		sh = "bash"
	}
	if sh, err = exec.LookPath(sh); err != nil {
		return nil, fmt.Errorf("bash config: shell: %w", err)
	}
	if sh, err = filepath.Abs(sh); err != nil {
		return nil, fmt.Errorf("bash config: shell: %w", err)
	}
	sb, err := Detect(cfg.Sandbox)
	if err != nil {
		return nil, err
	}
	id, err := runAs(ws, cfg.UID, cfg.GID)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	b := &bash{
		ws:         ws,
		shell:      sh,
		sb:         sb,
		id:         id,
		env:        environ(ws, cfg.Env, os.Getenv),
		gitWrapper: gitWrapper(gitEnv(ws)),
		gitConfigs: newGitConfigCache(),
		limits:     resolveLimits(cfg.Limits),
		maxOut:     cfg.MaxOutput,
		maxProg:    cfg.MaxProgress,
		network:    cfg.NetworkAllowed,
		proxy:      cfg.Proxy,
		log:        log,
	}
	if b.maxOut == 0 {
		b.maxOut = tools.DefaultMaxOutput
	}
	if b.maxProg == 0 {
		b.maxProg = DefaultMaxProgress
	}
	if sb.Enabled() {
		// PATH's directories, as far as the commands' user reaches them.
		b.sb.view = append(slices.Clone(sb.view), pathView(os.Getenv("PATH"), id)...)
	}
	for _, h := range cfg.Hide {
		b.sb.hide = append(b.sb.hide, filepath.Clean(h))
	}
	if t := workerTemp(); t != "" && sb.Enabled() && !slices.Contains(b.sb.hide, t) {
		// The worker's temporary directory holds other calls' homes and
		// egress proxy sockets; outside /tmp (a private tmpfs in the
		// sandbox) the root binding would show it.
		b.sb.hide = append(b.sb.hide, t)
		b.sb.reveal = append(b.sb.reveal, revealFromPath(t, os.Getenv("PATH"))...)
	}
	if id.root {
		// Commands run as root: root's own files are theirs to read
		// unless hidden.
		if fi, err := os.Stat("/root"); err == nil && fi.IsDir() && !slices.Contains(b.sb.hide, "/root") {
			b.sb.hide = append(b.sb.hide, "/root")
			b.sb.reveal = revealFromPath("/root", os.Getenv("PATH"))
		}
		if !sb.Enabled() {
			if b.setpriv, err = exec.LookPath("setpriv"); err != nil {
				return nil, errors.New("bash: commands in a root-owned workspace run as root without capabilities, and setpriv (util-linux), which drops them without a sandbox, is not in PATH")
			}
		}
	}
	if !sb.Enabled() {
		log.Warn("bash commands run without a sandbox", "reason", sb.Reason)
		if len(cfg.Hide) > 0 {
			log.Warn("bash config: hide has no effect without a sandbox", "hide", cfg.Hide)
		}
	}
	if err := b.setupCgroup(cfg.Limits.Processes); err != nil {
		return nil, err
	}
	b.setupInit()
	if err := b.check(); err != nil {
		return nil, err
	}
	if cfg.Prepared && b.sb.Enabled() && b.init != "" {
		b.pool = &pool{b: b, ready: map[string][]*prepared{}, filling: map[string]int{}, seen: map[string]bool{},
			tmpl: b.templated(cfg), templates: map[string]*prepared{}}
	}
	return b, nil
}

// tool is the bash tool b serves.
func (b *bash) tool() *tools.Tool {
	return &tools.Tool{
		Name:           tooldef.Bash.Name,
		Aliases:        slices.Clone(tooldef.Bash.Aliases),
		Description:    b.description(),
		Parameters:     tooldef.Bash.MustSchema(nil),
		Kind:           policy.Kind(tooldef.Bash.Kind),
		Category:       "builtin",
		DefaultTimeout: DefaultTimeout,
		MaxTimeout:     MaxTimeout,
		// The model's timeout argument lifts the pipeline's bound too.
		TimeoutArgument: "timeout",
		MaxOutput:       b.maxOut,
		Annotations:     tools.Annotations{Destructive: true, OpenWorld: true},
		Handler:         tools.HandlerFunc(b.handle),
	}
}

// workerTemp is the worker's temporary directory (os.TempDir, where
// per-call directories and egress proxy sockets are made) when the
// sandbox would show it: not /tmp or /dev/shm or under them, not /.
func workerTemp() string {
	t := filepath.Clean(os.TempDir())
	if r, err := filepath.EvalSymlinks(t); err == nil {
		t = r
	}
	if t == "/" || !filepath.IsAbs(t) {
		return ""
	}
	for _, private := range []string{"/tmp", "/dev/shm"} {
		if _, in := within(private, t); in {
			return ""
		}
	}
	return t
}

// revealFromPath lists the directories directly under hidden that hold
// an entry of the PATH value path (/root/.pyenv for /root/.pyenv/shims):
// programs installed there keep working, read-only, while the rest of
// hidden (.ssh, .aws, .docker, ...) is covered.
func revealFromPath(hidden, path string) []string {
	var out []string
	for _, dir := range filepath.SplitList(cleanPath(path)) {
		rel, ok := within(hidden, dir)
		if !ok || rel == "." {
			continue
		}
		top := filepath.Join(hidden, strings.Split(rel, string(filepath.Separator))[0])
		if fi, err := os.Stat(top); err == nil && fi.IsDir() && !slices.Contains(out, top) {
			out = append(out, top)
		}
	}
	return out
}

// setupCgroup finds where per-call cgroups can be made and settles the
// process limit (Limits.Processes).
func (b *bash) setupCgroup(configured int) error {
	if configured < 0 {
		b.limits.Processes = 0
		return nil
	}
	b.cg, b.cgReason = findCgroup()
	if b.cg == nil {
		if b.sb.Enabled() && os.Geteuid() != 0 && b.probeUserNS() {
			// Since Linux 5.14 RLIMIT_NPROC is counted per user
			// namespace: in a namespace of its own, the limit set inside
			// bounds the call, not every process of the worker's user.
			b.userNS = true
			if b.limits.Processes == 0 {
				b.limits.Processes = DefaultProcesses
			}
			return nil
		}
		if configured == 0 {
			b.log.Warn("bash: no per-call process limit: the worker cannot make cgroups or user namespaces; set limits.processes for a per-user RLIMIT_NPROC", "reason", b.cgReason)
		}
		return nil
	}
	if b.limits.Processes == 0 {
		b.limits.Processes = DefaultProcesses
	}
	return nil
}

// probeUserNS reports whether bwrap can give a call a user namespace.
func (b *bash) probeUserNS() bool {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	truePath, err := exec.LookPath("true")
	if err != nil {
		truePath = "/bin/true"
	}
	argv := b.sb.argv("", "/", false, identity{}, []string{"--unshare-user"}, []string{truePath})
	probe := exec.CommandContext(ctx, argv[0], argv[1:]...)
	probe.Env = []string{"PATH=" + defaultPath}
	return probe.Run() == nil
}

// startupCheck is what check runs: it fails only when the command cannot
// enter the workspace, and says so when it cannot write it.
const startupCheck = `test -w . || { echo "uid $(id -u) cannot write the workspace $PWD" >&2; exit 3; }`

// check runs one command the way calls will, so that a workspace the
// run-as user cannot enter is an error at start-up rather than on every
// call, and one it cannot write is a warning.
func (b *bash) check() error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	res, err := b.run(ctx, &tools.Call{ID: "startup-check"}, startupCheck, b.ws, false)
	if err != nil {
		return fmt.Errorf("bash: start-up check in %s: %w", b.ws, err)
	}
	stderr, _ := res.err.render(b.maxOut)
	switch res.code {
	case 0:
		return nil
	case 3:
		b.log.Warn("bash commands cannot write the workspace; give it to the user they run as (chown), or make it writable for them", "workspace", b.ws, "detail", strings.TrimSpace(stderr))
		return nil
	}
	return fmt.Errorf("bash: start-up check in %s: exit code %d: %s", b.ws, res.code, strings.TrimSpace(stderr))
}

func (b *bash) description() string {
	d := "Run a bash command line in the workspace and return its stdout, stderr and exit code. " +
		"The command starts in the workspace (or cwd inside it) with a minimal environment and an empty HOME of its own that does not outlive the call; " +
		"it is killed with everything it started when it ends, after timeout ms (default 60000, at most 600000), or when the call is cancelled, " +
		"so background processes do not survive the call. Each of stdout and stderr keeps at most " + strconv.Itoa(b.maxOut) +
		" characters (the middle is cut). A non-zero exit code is an error result with stderr."
	if b.sb.Enabled() {
		d += " It runs in a sandbox: the workspace is the only writable directory (plus a private /tmp), and there is no network access unless granted."
		if b.proxy != nil {
			d += " Granted network goes through an HTTP/HTTPS proxy (HTTP_PROXY, HTTPS_PROXY are set) that reaches only the hosts the policy allows."
		}
	}
	return d
}

// realDir is the absolute path of dir with symlinks resolved; it must be a
// directory.
func realDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", real)
	}
	return real, nil
}

// runAs decides who commands run as; see Config.UID.
func runAs(ws string, uid, gid int) (identity, error) {
	if os.Geteuid() != 0 {
		return identity{}, nil
	}
	fi, err := os.Stat(ws)
	if err != nil {
		return identity{}, fmt.Errorf("bash config: workspace: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return identity{}, fmt.Errorf("bash config: workspace: cannot read the owner of %s", ws)
	}
	if st.Uid == 0 && uid == 0 {
		// Root in a container with a root-owned workspace: commands run
		// as root, so that they can write it and files keep their owner,
		// with every capability gone (root without capabilities is only
		// an owner like any other).
		return identity{root: true}, nil
	}
	id := identity{drop: true, uid: nobody, gid: nobody}
	if st.Uid != 0 {
		id.uid = st.Uid
		if st.Gid != 0 {
			id.gid = st.Gid
		}
	}
	if uid > 0 {
		id.uid, id.gid = uint32(uid), nobody
	}
	if gid > 0 {
		id.gid = uint32(gid)
	}
	return id, nil
}

// resolveLimits applies the defaults and lowers each limit to the
// worker's own hard limit, which an unprivileged command could not exceed.
func resolveLimits(l Limits) Limits {
	def := func(v, d int64) int64 {
		if v == 0 {
			return d
		}
		return v
	}
	capTo := func(v int64, resource int) int64 {
		var rl syscall.Rlimit
		if v > 0 && syscall.Getrlimit(resource, &rl) == nil && rl.Max != ^uint64(0) && uint64(v) > rl.Max {
			return int64(rl.Max)
		}
		return v
	}
	return Limits{
		CPUSeconds:   int(capTo(def(int64(l.CPUSeconds), DefaultCPUSeconds), syscall.RLIMIT_CPU)),
		FileSize:     capTo(def(l.FileSize, DefaultFileSize), syscall.RLIMIT_FSIZE),
		AddressSpace: capTo(def(l.AddressSpace, DefaultAddressSpace), syscall.RLIMIT_AS),
		OpenFiles:    int(capTo(def(int64(l.OpenFiles), DefaultOpenFiles), syscall.RLIMIT_NOFILE)),
		Processes:    l.Processes,
		Memory:       def(l.Memory, DefaultMemory),
	}
}

// prologue is the bash text that sets the limits before a command runs
// without a sandbox. bash's ulimit builtin is setrlimit(2) in the process
// that then execs the command's own bash: it needs no other program, and
// without -H or -S sets the hard limit too. In a sandbox the worker sets
// the same limits on the process bwrap holds (hold_linux.go).
func (l Limits) prologue() string {
	parts := []string{"ulimit -c 0"}
	add := func(flag string, v int64) {
		if v > 0 {
			parts = append(parts, "ulimit -"+flag+" "+strconv.FormatInt(v, 10))
		}
	}
	add("t", int64(l.CPUSeconds))
	if l.FileSize > 0 {
		add("f", (l.FileSize+1023)/1024) // 1024-byte blocks
	}
	if l.AddressSpace > 0 {
		add("v", (l.AddressSpace+1023)/1024) // KiB
	}
	add("n", int64(l.OpenFiles))
	add("u", int64(l.Processes))
	return strings.Join(parts, " && ")
}

// rlimits are the resource limits a command gets. With a per-call cgroup
// the process limit is its pids.max, not RLIMIT_NPROC. Without a cgroup
// or a user namespace of the call's own, RLIMIT_NPROC is the user's across
// the machine: only a configured one is set.
func (b *bash) rlimits() Limits {
	l := b.limits
	if b.cg != nil {
		l.Processes = 0
	}
	return l
}

// inner is the command line that sets the limits and runs command, for a
// command started without a sandbox.
func (b *bash) inner(command string) []string {
	script := b.rlimits().prologue() + ` || { echo "toolgate: cannot set resource limits" >&2; exit 126; }; exec -a bash "$0" -c "$1"`
	return []string{b.shell, "-c", script, b.shell, command}
}

// direct is the command line of a sandboxed command, whose limits the
// worker sets while bwrap holds it (hold_linux.go): bash itself, with
// "bash" as $0 (the name its messages start with), as inner's exec -a
// gives it.
func (b *bash) direct(command string) []string {
	return []string{b.shell, "-c", command, "bash"}
}

// args are a call's decoded arguments.
type args struct {
	command, cwd string
	timeout      time.Duration
}

func argErr(field, format string, a ...any) error {
	return &tools.ArgumentError{Tool: "bash", Fields: []tools.FieldError{{Field: field, Message: fmt.Sprintf(format, a...)}}}
}

// parseArgs reads the arguments the pipeline validated, checking them
// again so that the handler fails closed when called directly.
func parseArgs(c *tools.Call) (args, error) {
	m := c.Args
	if m == nil && len(c.Arguments) > 0 {
		if err := json.Unmarshal(c.Arguments, &m); err != nil {
			return args{}, argErr("", "not a JSON object: %v", err)
		}
	}
	var a args
	cmd, ok := m["command"].(string)
	switch {
	case !ok:
		return a, argErr("/command", "required, a string")
	case strings.TrimSpace(cmd) == "":
		return a, argErr("/command", "must not be empty")
	case strings.ContainsRune(cmd, 0):
		return a, argErr("/command", "must not contain NUL bytes")
	}
	a.command = cmd
	if v, present := m["cwd"]; present {
		s, ok := v.(string)
		if !ok {
			return a, argErr("/cwd", "must be a string")
		}
		if strings.ContainsRune(s, 0) {
			return a, argErr("/cwd", "must not contain NUL bytes")
		}
		a.cwd = s
	}
	a.timeout = DefaultTimeout
	if v, present := m["timeout"]; present {
		ms, ok := intArg(v)
		if !ok || ms < 0 || ms > MaxTimeout.Milliseconds() {
			return a, argErr("/timeout", "must be an integer number of milliseconds from 0 to %d", MaxTimeout.Milliseconds())
		}
		if ms > 0 {
			a.timeout = time.Duration(ms) * time.Millisecond
		}
	}
	return a, nil
}

func intArg(v any) (int64, bool) {
	switch n := v.(type) {
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	case float64:
		return int64(n), n == float64(int64(n))
	case int:
		return int64(n), true
	case int64:
		return n, true
	}
	return 0, false
}

// resolveCwd is the real directory a call asked for, which must be the
// workspace or inside it. The sandbox, not this check, is what confines
// a command: a command can cd anywhere it may read.
func (b *bash) resolveCwd(p string) (string, error) {
	if p == "" {
		return b.ws, nil
	}
	full := p
	if !filepath.IsAbs(full) {
		full = filepath.Join(b.ws, full)
	}
	if _, ok := within(b.ws, filepath.Clean(full)); !ok {
		return "", argErr("/cwd", "%q is outside the workspace %s", p, b.ws)
	}
	real, err := filepath.EvalSymlinks(full)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", argErr("/cwd", "%q does not exist in the workspace", p)
		}
		return "", argErr("/cwd", "%q: %v", p, err)
	}
	if _, ok := within(b.ws, real); !ok {
		return "", argErr("/cwd", "%q leads outside the workspace (to %s)", p, real)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", argErr("/cwd", "%q: %v", p, err)
	}
	if !fi.IsDir() {
		return "", argErr("/cwd", "%q is not a directory", p)
	}
	return real, nil
}

// allowNetwork asks Config.NetworkAllowed; a panic in it is a no.
func (b *bash) allowNetwork(c *tools.Call) (ok bool) {
	if b.network == nil {
		return false
	}
	defer func() {
		if r := recover(); r != nil {
			b.log.Error("NetworkAllowed panicked; network denied", "call_id", c.ID, "panic", r)
			ok = false
		}
	}()
	return b.network(c)
}

func (b *bash) handle(ctx context.Context, c *tools.Call) (*tools.Output, error) {
	a, err := parseArgs(c)
	if err != nil {
		return nil, err
	}
	cwd, err := b.resolveCwd(a.cwd)
	if err != nil {
		return nil, err
	}
	network := b.allowNetwork(c)
	cause := fmt.Errorf("%w: the command ran past its timeout of %s", tools.ErrTimeout, a.timeout)
	runCtx, cancel := context.WithTimeoutCause(ctx, a.timeout, cause)
	defer cancel()
	res, err := b.run(runCtx, c, fixedState+judged(c, a.command), cwd, network)
	if err != nil {
		return nil, err
	}
	var killed error
	if res.cancelled {
		killed = killedError(runCtx)
	}
	out := b.output(res, network, killed)
	b.log.Debug("bash command ended", "call_id", c.ID, "tool", "bash", "agent", c.Agent,
		"sandbox", b.sb.Kind, "exit_code", res.code, "killed", killed != nil,
		"stdout_bytes", res.out.bytes, "stderr_bytes", res.err.bytes, "duration", res.duration)
	return out, killed
}

// fixedState is what bash runs before the command, on the command's own
// first line (so the command's line numbers and the lines bash parses
// as one stay as they were): the shell state the gate judged the command
// in, which the command cannot change. cd and pushd resolve .. the way
// the kernel does (set -P), as the gate resolves them; bash stays in its
// own dialect, never POSIX mode; and the variables that change where cd
// goes (CDPATH), how bash parses and expands (POSIXLY_CORRECT,
// BASH_COMPAT, GLOBIGNORE, EXECIGNORE), what a $"..." string translates
// to (TEXTDOMAIN, TEXTDOMAINDIR), what a shell reads at start (BASH_ENV,
// ENV) and what runs around commands (PS4, PROMPT_COMMAND,
// BASH_XTRACEFD, BASH_LOADABLES_PATH) are read-only: assigning one, even
// inside an expansion (${CDPATH:=dir}), fails and stops the list it is
// in. PS4 keeps bash's default, so set -x prints as usual. IFS, PATH,
// HOME and the locale stay assignable (IFS= read is common); the gate
// asks about assigning them. SHELLOPTS and BASHOPTS are read-only in
// bash already.
const fixedState = "set -P +o posix; unset -v CDPATH POSIXLY_CORRECT BASH_COMPAT TEXTDOMAIN TEXTDOMAINDIR GLOBIGNORE EXECIGNORE " +
	"BASH_ENV ENV PROMPT_COMMAND BASH_XTRACEFD BASH_LOADABLES_PATH; PS4='+ '; readonly CDPATH POSIXLY_CORRECT BASH_COMPAT " +
	"TEXTDOMAIN TEXTDOMAINDIR GLOBIGNORE EXECIGNORE BASH_ENV ENV PS4 PROMPT_COMMAND BASH_XTRACEFD BASH_LOADABLES_PATH; "

// judged is the command line that runs: the one the policy gate rendered
// from the syntax tree it judged, when it judged one (a gate's decision
// carries it), else the command as given (no policy: nothing judged it).
func judged(c *tools.Call, command string) string {
	if c.Decision != nil && c.Decision.Rendered {
		return c.Decision.Command
	}
	return command
}

// killedError is the error of a call whose command was killed because
// ctx was done: it wraps ctx's error and its cause, and tools.ErrTimeout
// for a deadline.
func killedError(ctx context.Context) error {
	e, cause := ctx.Err(), context.Cause(ctx)
	if errors.Is(e, context.DeadlineExceeded) && !errors.Is(cause, tools.ErrTimeout) {
		cause = fmt.Errorf("%w: %w", tools.ErrTimeout, cause)
	}
	if errors.Is(cause, e) {
		return fmt.Errorf("bash: command killed: %w", cause)
	}
	return fmt.Errorf("bash: command killed: %w (%w)", cause, e)
}

// result is what a run gathered.
type result struct {
	out, err  *capture
	code      int
	cancelled bool // killed because the context was done
	duration  time.Duration
	peak      int // most processes held at once; 0 when unknown
	// memLimited: the call's cgroup bounded its memory.
	memLimited bool
	// proxied: the command's network was the egress proxy only.
	proxied bool
	// egressRefused are the connections the proxy refused, with why.
	egressRefused []string
	// exec says what the command could execute; write how much of the
	// workspace it could write (empty without a sandbox).
	exec, write string
}

// run starts the command, reads its output while it runs, and returns
// once its process group is gone.
func (b *bash) run(ctx context.Context, c *tools.Call, command, cwd string, network bool) (*result, error) {
	var planned *plan // the call's rule and grant, when the pool judged them
	if b.pooled(network) {
		res, ok, p, err := b.runPrepared(ctx, c, command, cwd, network)
		if ok {
			return res, err
		}
		planned = p
	}
	pc, err := b.newCallDir()
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(pc.root)
	argv, dir, id := b.inner(command), cwd, b.id
	env := callEnv(b.env, pc.home, pc.tmp)
	proxied := false
	var stopProxy func() []string
	var files sandboxFiles // the worker's copies are closed once bwrap started
	defer files.close()
	var held *hold
	var execWhy, writeScope string
	if b.sb.Enabled() {
		home := sandboxHome(b.ws)
		filter, err := seccompFile()
		if err != nil {
			return nil, fmt.Errorf("bash: %w", err)
		}
		// A call whose execution is restricted loads the filter in its
		// first program, after that program's remounts (the filter
		// forbids mounts); bwrap loads it for the others.
		var rule execRule
		if planned != nil {
			rule = planned.rule
		} else {
			rule = b.allowlist(c)
		}
		restrict := rule.restrict
		execWhy = rule.why
		filterFD := files.add(filter)
		var mounts []string
		if !restrict {
			mounts = []string{"--seccomp", filterFD}
		}
		// The limits are set while bwrap holds the command
		// (hold_linux.go): the command is bash itself.
		var infoW, blockR *os.File
		if held, infoW, blockR, err = newHold(); err != nil {
			return nil, fmt.Errorf("bash: %w", err)
		}
		defer held.close()
		mounts = append(mounts, "--info-fd", files.add(infoW), "--block-fd", files.add(blockR))
		argv = b.direct(command)
		mounts = append(mounts, "--bind", pc.home, home)
		var sb Sandbox
		var gm []string
		if planned != nil {
			sb, gm, writeScope = planned.sb, planned.grant, planned.write
		} else if sb, gm, writeScope, err = b.grantView(c, true); err != nil {
			return nil, err
		}
		mounts = append(mounts, gm...)
		gm, err = b.gitView(ctx, c, rule, files.data)
		if err != nil {
			return nil, err
		}
		mounts = append(mounts, gm...)
		env = callEnv(b.env, home, "/tmp")
		if network && b.proxy != nil {
			inner := argv
			if restrict {
				// The relay (this binary) starts a first program that
				// restricts the command; the relay itself runs only
				// its own code, and is never on the allowlist.
				inner = sandboxinit.Spec{Restrict: true, Allow: rule.allow, AllowDirs: rule.dirs}.Args(argv)
			}
			stop, pm, pargv, penv, err := b.proxy.attach(ctx, c, inner)
			if err != nil {
				return nil, fmt.Errorf("bash: egress proxy: %w", err)
			}
			stopProxy = sync.OnceValue(stop)
			defer stopProxy()
			mounts, argv, env = append(mounts, pm...), pargv, append(env, penv...)
			network, proxied = false, true // the sandbox keeps a network namespace of its own
		}
		// bwrap starts as the worker; inside, setpriv drops root or,
		// when the gate resolved the call's programs, the sandbox's
		// first program (pkg/sandboxinit) drops it and restricts
		// execution to them (execlist_linux.go), after the relay when
		// there is one.
		sid := b.id
		if restrict {
			mounts = append(mounts, initMounts(b.init)...)
			spec := b.initSpec(!proxied, rule.allow)
			spec.AllowDirs = rule.dirs
			if b.noexec {
				spec.Noexec, spec.KeepExec = noexecDirs(b.ws), keepExec
			}
			spec.Seccomp, _ = strconv.Atoi(filterFD)
			argv, sid.init, sid.noexec = spec.Args(argv), true, b.noexec
		}
		argv, dir, id = sb.argv(b.ws, cwd, network, sid, mounts, argv), "/", identity{}
	} else if b.id.root {
		argv = append(rootNoCaps(b.setpriv), argv...)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, startError{fmt.Errorf("bash: stdout pipe: %w", err)}
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, startError{fmt.Errorf("bash: stderr pipe: %w", err)}
	}
	var cc *callCgroup
	var cgFD *os.File
	if b.cg != nil {
		if cc, err = b.cg.newCall(b.limits.Processes, b.limits.Memory); err != nil {
			outR.Close()
			outW.Close()
			errR.Close()
			errW.Close()
			return nil, fmt.Errorf("bash: per-call cgroup: %w", err)
		}
		defer cc.remove()
		// cgroup v2: the command is cloned into its cgroup
		// (CLONE_INTO_CGROUP); v1: started from a thread that moved
		// itself in (callCgroup.startIn).
		if cc.v2 {
			if cgFD, err = cc.open(); err == nil {
				defer cgFD.Close()
			}
		}
		if err != nil {
			outR.Close()
			outW.Close()
			errR.Close()
			errW.Close()
			return nil, fmt.Errorf("bash: per-call cgroup: %w", err)
		}
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.ExtraFiles = files.files
	cmd.SysProcAttr = sysProcAttr(id)
	if cgFD != nil {
		intoCgroup(cmd.SysProcAttr, int(cgFD.Fd()))
	}
	g := &group{}
	cmd.Cancel = func() error { return g.cancel(cmd.Process.Pid) }
	cmd.WaitDelay = waitDelay

	start := time.Now()
	if cc != nil && !cc.v2 {
		err = cc.startIn(cmd)
	} else {
		err = cmd.Start()
	}
	outW.Close()
	errW.Close()
	files.close()
	if held != nil {
		if err == nil {
			if err = held.release(b.rlimits()); err != nil {
				_ = g.finish(cmd.Process.Pid)
				_ = cmd.Wait()
			}
		}
	}
	if err != nil {
		outR.Close()
		errR.Close()
		if ctx.Err() != nil {
			return nil, killedError(ctx)
		}
		if id.drop && errors.Is(err, fs.ErrPermission) && !errors.Is(err, errCgroup) {
			return nil, startError{fmt.Errorf("bash: commands run as uid %d cannot enter %s or run %s (check the directory and its parents): %w", id.uid, dir, argv[0], err)}
		}
		return nil, startError{fmt.Errorf("bash: start %s in %s: %w", argv[0], dir, err)}
	}
	res := &result{out: newCapture(b.maxOut), err: newCapture(b.maxOut), proxied: proxied, exec: execWhy, write: writeScope}
	return b.await(ctx, c, b.cmdWait(c, cmd, g), outR, errR, cc, start, res, stopProxy)
}

// cmdWait waits for the started command cmd of the call c until its
// process group g is gone: its exit code, whether g was cancelled.
func (b *bash) cmdWait(c *tools.Call, cmd *exec.Cmd, g *group) func() (int, bool, error) {
	return func() (int, bool, error) {
		pid := cmd.Process.Pid
		if err := waitExited(pid); err != nil {
			b.log.Error("bash: waiting for the command failed; killing its group", "call_id", c.ID, "err", err)
		}
		cancelled := g.finish(pid)
		waitErr := cmd.Wait()
		if cmd.ProcessState == nil {
			return 0, cancelled, fmt.Errorf("bash: wait: %w", waitErr)
		}
		return exitCode(cmd.ProcessState), cancelled, nil
	}
}

// await reads the output of the started command into res until wait
// says it is gone (its exit code, whether it was killed because ctx was
// done), from its pipes outR and errR (its cgroups cc), and completes
// res.
func (b *bash) await(ctx context.Context, c *tools.Call, wait func() (int, bool, error), outR, errR *os.File, cc *callCgroup,
	start time.Time, res *result, stopProxy func() []string) (*result, error) {
	var p *pump
	if c.Progress != nil {
		p = newPump(c.Progress, b.maxProg, b.log.With("call_id", c.ID))
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go drain(&wg, outR, 0, res.out, p)
	go drain(&wg, errR, 1, res.err, p)

	code, cancelled, waitErr := wait()
	res.cancelled = cancelled
	res.duration = time.Since(start)

	// What the group wrote is in the pipes and is read to the end; only a
	// process that left the group can keep a pipe open, and it is not
	// waited for.
	deadline := time.Now().Add(drainGrace)
	for _, f := range []*os.File{outR, errR} {
		if err := f.SetReadDeadline(deadline); err != nil {
			b.log.Warn("bash: cannot bound the output drain", "call_id", c.ID, "err", err)
		}
	}
	wg.Wait()
	outR.Close()
	errR.Close()
	if p != nil {
		var grace time.Duration
		if ctx.Err() != nil {
			grace = drainGrace
		}
		p.close(grace)
	}

	if stopProxy != nil {
		res.egressRefused = stopProxy()
	}
	if waitErr != nil {
		return nil, waitErr
	}
	res.code = code
	if cc != nil {
		res.peak = cc.peak()
		res.memLimited = cc.memDir != "" || (cc.v2 && b.cg.memory)
	}
	return res, nil
}

// grantView is the sandbox showing the policy's read roots for call c,
// the mounts of its grant (grantFor, which creates the files it may
// write when create) and its write scope.
func (b *bash) grantView(c *tools.Call, create bool) (sb Sandbox, mounts []string, write string, err error) {
	gr, err := grantFor(c, b.ws, b.id, create)
	if err != nil {
		return sb, nil, "", err
	}
	sb, mounts = b.sb, gr.mounts
	if c.Decision != nil && c.Decision.Access != nil {
		sb.reads = c.Decision.Access.Reads
	}
	if b.userNS {
		mounts = append(mounts, "--unshare-user")
	}
	return sb, mounts, gr.write.String(), nil
}

// gitView are the mounts of git's wrapper and, without a person's
// approval, the repository's sanitised configs, for a call with the
// execute rule rule. A call restricted to the programs the gate resolved
// cannot execve git unless it names git, so only then does it get them:
// fewer mounts for bwrap to make. (git started through the dynamic
// loader, which Landlock cannot refuse, reads the read-only config; every
// program that config names still needs an execve the restriction
// judges.) data passes their contents to bwrap.
func (b *bash) gitView(ctx context.Context, c *tools.Call, rule execRule, data func([]byte) (string, error)) ([]string, error) {
	if rule.restrict && !rule.git {
		return nil, nil
	}
	mounts, err := gitWrapperMounts(b.gitWrapper, data)
	if err != nil {
		return nil, fmt.Errorf("bash: git wrapper: %w", err)
	}
	if !c.Approved {
		// Without a person, git's program-running configuration of
		// the workspace's repository is replaced for the call.
		gm, err := gitMounts(ctx, b.ws, b.gitConfigs, data)
		if err != nil {
			return nil, fmt.Errorf("bash: neutralise the repository's git config: %w", err)
		}
		mounts = append(mounts, gm...)
	}
	return mounts, nil
}

// callDir is a call's private directory on the worker, removed when the
// call ends: home is the command's HOME (bound into the sandbox), tmp its
// TMPDIR without a sandbox.
type callDir struct{ root, home, tmp string }

// newCallDir creates a call's private directory owned by the user
// commands run as: in a sandbox, its home itself (its TMPDIR is the
// sandbox's private /tmp); without one, a directory (mode 0711) holding
// home and tmp.
func (b *bash) newCallDir() (*callDir, error) {
	fail := func(root string, err error) (*callDir, error) {
		if root != "" {
			os.RemoveAll(root)
		}
		return nil, fmt.Errorf("bash: per-call directory: %w", err)
	}
	if b.sb.Enabled() {
		home, err := os.MkdirTemp("", "toolgate-home-") // mode 0700
		if err != nil {
			return fail("", err)
		}
		if b.id.drop {
			if err := os.Chown(home, int(b.id.uid), int(b.id.gid)); err != nil {
				return fail(home, err)
			}
		}
		return &callDir{root: home, home: home}, nil
	}
	root, err := os.MkdirTemp("", "toolgate-call-")
	if err != nil {
		return fail("", err)
	}
	pc := &callDir{root: root, home: filepath.Join(root, "home"), tmp: filepath.Join(root, "tmp")}
	err = os.Chmod(root, 0o711) // the run-as user passes through to home
	for _, d := range []string{pc.home, pc.tmp} {
		if err == nil {
			err = os.Mkdir(d, 0o700)
		}
		if err == nil && b.id.drop {
			err = os.Chown(d, int(b.id.uid), int(b.id.gid))
		}
	}
	if err != nil {
		return fail(root, err)
	}
	return pc, nil
}

// sandboxHome is where a call's home appears inside the sandbox: in its
// private /tmp, or /dev/shm when the workspace lies there.
func sandboxHome(ws string) string {
	for _, h := range []string{"/tmp/home", "/dev/shm/home"} {
		_, in := within(h, ws)
		_, over := within(ws, h)
		if !in && !over {
			return h
		}
	}
	return "/tmp/.home-" + strconv.Itoa(os.Getpid())
}

// drain reads one stream into its capture and the progress pump.
func drain(wg *sync.WaitGroup, f *os.File, i int, c *capture, p *pump) {
	defer wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			c.Write(buf[:n])
			if p != nil {
				p.write(i, buf[:n])
			}
		}
		if err != nil {
			return
		}
	}
}

// exitCode is the exit status, or 128 plus the signal that killed the
// process, as shells report it.
func exitCode(st *os.ProcessState) int {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// output builds the tool's Output from a run.
func (b *bash) output(res *result, network bool, killed error) *tools.Output {
	stdout, outCut := res.out.render(b.maxOut)
	stderr, errCut := res.err.render(b.maxOut)
	md := map[string]any{
		"exit_code":    res.code,
		"stdout":       stdout,
		"stderr":       stderr,
		"stdout_bytes": res.out.bytes,
		"stderr_bytes": res.err.bytes,
		"sandbox":      b.sb.Kind,
		"network":      network || !b.sb.Enabled(),
		"timed_out":    killed != nil && errors.Is(killed, context.DeadlineExceeded),
		"duration_ms":  res.duration.Milliseconds(),
	}
	if res.proxied {
		md["egress"] = "proxy"
		if len(res.egressRefused) > 0 {
			md["egress_refused"] = res.egressRefused
		}
	}
	if res.exec != "" {
		md["exec"], md["write"] = res.exec, res.write
	}
	if res.peak > 0 {
		md["processes_peak"] = res.peak
	}
	if res.memLimited {
		md["memory_limit"] = b.limits.Memory
	}
	if outCut > 0 || errCut > 0 {
		md["truncated"] = true
		md["stdout_truncated_chars"] = outCut
		md["stderr_truncated_chars"] = errCut
	}
	return &tools.Output{
		Content:  b.content(res, killed),
		IsError:  res.code != 0 || killed != nil,
		Metadata: md,
	}
}

// content is the text for the model: stdout, then stderr, then how the
// command ended, within MaxOutput characters in all.
func (b *bash) content(res *result, killed error) string {
	var foot []string
	if res.code != 0 && killed == nil {
		foot = append(foot, fmt.Sprintf("[exit code %d]", res.code))
	}
	if killed != nil {
		foot = append(foot, "["+strings.TrimPrefix(killed.Error(), "bash: ")+"]")
	}
	footer := strings.Join(foot, "\n")
	const label = "[stderr]\n"
	avail := max(b.maxOut-len([]rune(footer))-len(label)-4, 64)
	outN, errN := int(res.out.runes), int(res.err.runes)
	outShare, errShare := outN, errN
	if outN+errN > avail {
		errShare = min(errN, max(avail/3, avail-outN))
		outShare = avail - errShare
	}
	var s strings.Builder
	if outN > 0 && outShare > 0 {
		text, _ := res.out.render(outShare)
		s.WriteString(text)
	}
	if errN > 0 && errShare > 0 {
		if s.Len() > 0 && !strings.HasSuffix(s.String(), "\n") {
			s.WriteByte('\n')
		}
		text, _ := res.err.render(errShare)
		s.WriteString(label)
		s.WriteString(text)
	}
	if footer != "" {
		if s.Len() > 0 && !strings.HasSuffix(s.String(), "\n") {
			s.WriteByte('\n')
		}
		s.WriteString(footer)
	}
	if s.Len() == 0 {
		return "(no output)"
	}
	return s.String()
}
