package test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/policy/shell"
)

// The execution oracle: every command the gate allows - the shell
// corpus's allowed lines and thousands generated from a grammar of
// read-only programs, their options, comments, continuations, quotes
// inside globs and braces, nested shells and the builtins that assign
// names - runs, as the gate rendered it, in a bubblewrap sandbox under
// strace (execve and openat of the whole process tree). Every program
// executed must be one the gate judged (or the shell), and every file
// opened one the gate allows (CheckPath), or part of the system's
// runtime (libraries, locales, /proc, /dev). Any difference fails,
// printing the command. The commands that run sh run a second time with
// sh being bash (in POSIX mode, as bash named sh runs): the strings the
// gate parsed as POSIX shell, under both shells that speak it.

// oracleGenerated is how many generated allowed commands the oracle runs.
var oracleGenerated = 2000

// oracleBatch is how many commands one sandbox runs, one after another.
const oracleBatch = 250

type oracleCase struct {
	origin string // corpus:LINE or gen:N
	policy string // builtin, seed000 or full
	src    string // as written
	run    string // as the gate rendered it
	progs  []string
}

// oracleRuntime are the paths any program may open: the loader, its
// libraries, locales and time zones, kernel interfaces, the programs'
// own data files.
var oracleRuntime = []string{"/usr/lib/", "/lib/", "/lib64/", "/usr/lib64/", "/usr/libexec/", "/usr/share/locale/",
	"/usr/share/zoneinfo/", "/usr/share/misc/", "/usr/share/file/", "/usr/share/git-core/", "/usr/share/terminfo/",
	"/etc/terminfo/", "/proc/", "/sys/", "/dev/", "/etc/ld.so.cache", "/etc/localtime", "/etc/nsswitch.conf",
	"/etc/magic", "/etc/gitconfig", "/etc/inputrc", "/usr/share/i18n/", "/usr/share/X11/locale/", "/etc/locale.alias",
	"/usr/share/locale-langpack/", "/etc/mime.types", "/etc/os-release", "/usr/lib/os-release", "/etc/lsb-release"}

// oracleNames are the programs that read the user and group databases to
// print names (the shells look their user up at start, and so do the
// scripts of sh when sh is bash).
var oracleNames = map[string]bool{"bash": true, "dash": true, "sh": true, "zcat": true, "gunzip": true, "zgrep": true, "timeout": true, "tar": true, "curl": true, "ls": true, "id": true, "whoami": true, "groups": true, "stat": true, "find": true,
	"tree": true, "git": true, "du": true}

// oracleHelpers are directories of programs a judged program runs itself.
// (zcat is a script of sh that runs gzip; tar -z runs gzip).
var oracleHelpers = map[string][]string{"git": {"/usr/lib/git-core/"}, "zcat": {"/usr/bin/dash", "/usr/bin/gzip"},
	"gunzip": {"/usr/bin/dash", "/usr/bin/gzip"}, "zgrep": {"/usr/bin/dash", "/usr/bin/gzip", "/usr/bin/grep"},
	"tar": {"/usr/bin/gzip", "/usr/bin/bzip2", "/usr/bin/xz", "/usr/bin/zstd"}}

// oracleOwn are the configuration files of the system a program reads
// for itself (name resolution, certificates, its own settings).
var oracleOwn = map[string][]string{
	"wget": {"/etc/wgetrc", "/etc/ssl/", "/etc/resolv.conf", "/etc/hosts", "/etc/host.conf", "/etc/gai.conf", "/usr/share/ca-certificates/"},
	"curl": {"/etc/ssl/", "/etc/resolv.conf", "/etc/hosts", "/etc/host.conf", "/etc/gai.conf", "/usr/share/ca-certificates/"},
}

func TestExecutionOracle(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	testenv.LookPath(t, "strace", "strace")
	testenv.LookPath(t, "git", "git")
	if n, err := strconv.Atoi(os.Getenv("ORACLE_N")); err == nil {
		oracleGenerated = n
	}
	bashPath := realProgram(t, "bash")
	timeoutPath := realProgram(t, "timeout")

	full, _, err := policy.Parse([]byte("tools:\n  write: allow\n  edit: allow\nexec:\n  security: full\n"), "full")
	if err != nil {
		t.Fatal(err)
	}
	seed, _, err := policy.Load("../pkg/policy/testdata/seed000.yaml")
	if err != nil {
		t.Fatal(err)
	}
	gates := map[string]*policy.Gate{"builtin": policy.NewGate(policy.Default()), "seed000": policy.NewGate(seed), "full": policy.NewGate(full)}

	// Each policy judges and runs in a workspace of its own: a command a
	// policy allows may change its workspace.
	wss := map[string]string{}
	for name := range gates {
		wss[name] = oracleWorkspace(t)
	}
	judge := func(pol, origin, src string) (oracleCase, bool) {
		d := gates[pol].Evaluate(context.Background(), policy.Request{Agent: "oracle", Tool: "bash", Known: true,
			Kind: policy.KindExecute, Arguments: map[string]any{"command": src}, Workspace: wss[pol]})
		if d.Action != policy.Allow {
			return oracleCase{}, false
		}
		if !d.Rendered {
			t.Fatalf("%s: %q allowed without a rendered command", origin, src)
		}
		return oracleCase{origin: origin, policy: pol, src: src, run: d.Command, progs: judgedPrograms(t, d.Command, wss[pol])}, true
	}

	var cases []oracleCase
	for _, l := range corpusAllowed(t) {
		if c, ok := judge(l.policy, l.origin, l.src); ok {
			cases = append(cases, c)
		}
	}
	corpus := len(cases)
	r := rand.New(rand.NewSource(23))
	gen := 0
	for tries := 0; gen < oracleGenerated && tries < 20*oracleGenerated; tries++ {
		src := genScript(r, 0)
		if c, ok := judge("builtin", "gen:"+strconv.Itoa(tries), src); ok {
			cases = append(cases, c)
			gen++
		}
	}
	if gen < oracleGenerated {
		t.Fatalf("the grammar gave %d allowed commands, want %d", gen, oracleGenerated)
	}
	t.Logf("oracle: %d allowed corpus commands, %d generated", corpus, gen)

	// The commands that run sh (dash here) run again with sh being bash,
	// which speaks the same POSIX dialect in its POSIX mode.
	var posix []oracleCase
	if dash, err := exec.LookPath("dash"); err == nil {
		if r, err := filepath.EvalSymlinks(dash); err == nil {
			dash = r
		}
		for _, c := range cases {
			if slices.Contains(c.progs, dash) {
				c.origin += "/sh-is-bash"
				posix = append(posix, c)
			}
		}
	}
	t.Logf("oracle: %d commands run sh, run again with sh being bash in POSIX mode", len(posix))
	var batches [][]oracleCase
	var posixBatch []bool
	byPolicy := map[string][]oracleCase{}
	for _, c := range cases {
		byPolicy[c.policy] = append(byPolicy[c.policy], c)
	}
	for _, c := range posix {
		byPolicy[c.policy+"/sh-is-bash"] = append(byPolicy[c.policy+"/sh-is-bash"], c)
	}
	for _, pol := range []string{"builtin", "seed000", "full", "builtin/sh-is-bash", "seed000/sh-is-bash", "full/sh-is-bash"} {
		cs := byPolicy[pol]
		for len(cs) > 0 {
			n := min(oracleBatch, len(cs))
			batches = append(batches, cs[:n])
			posixBatch = append(posixBatch, strings.HasSuffix(pol, "/sh-is-bash"))
			cs = cs[n:]
		}
	}
	// A control: a command that runs more than was judged must be seen,
	// or the oracle proves nothing.
	control := oracleCase{origin: "control", policy: "builtin", src: "ls", run: "ls; touch control-marker; cat /etc/hostname",
		progs: judgedPrograms(t, "ls", wss["builtin"])}
	if ds := runOracleBatch(t, -1, []oracleCase{control}, wss["builtin"], gates["builtin"], bashPath, timeoutPath, false); len(ds) < 2 {
		t.Fatalf("the oracle did not see a command run more than was judged: %q", ds)
	}
	var mu sync.Mutex
	var diffs []string
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for i, b := range batches {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ds := runOracleBatch(t, i, b, wss[b[0].policy], gates[b[0].policy], bashPath, timeoutPath, posixBatch[i])
			mu.Lock()
			diffs = append(diffs, ds...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(diffs) > 0 {
		slices.Sort(diffs)
		t.Fatalf("%d differences between what the gate judged and what ran:\n%s", len(diffs), strings.Join(diffs, "\n"))
	}
}

// realProgram is the real path of a program found in PATH.
func realProgram(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// oracleWorkspace is a workspace with files the corpus and the grammar
// name, and a repository.
func oracleWorkspace(t *testing.T) string {
	ws := t.TempDir()
	if r, err := filepath.EvalSymlinks(ws); err == nil {
		ws = r
	}
	for name, content := range map[string]string{
		"main.go": "package main\n\nfunc main() {}\n", "README.md": "hello\nworld\n", "sub/a.txt": "a:b\nc:d\n",
		"a b.txt": "spaced\n", "data.json": `{"name":"x","list":[1,2]}` + "\n", "secrets/server.pem": "PEM\n",
		"notes.txt": "TODO one\n", "b.txt": "b\na\n",
	} {
		p := filepath.Join(ws, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hostGit(t, ws, "init", "-q")
	hostGit(t, ws, "add", "main.go", "README.md", "sub/a.txt")
	hostGit(t, ws, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "init")
	return ws
}

type corpusLine struct{ origin, policy, src string }

// corpusAllowed are the shell corpus's lines whose verdict is allow.
func corpusAllowed(t *testing.T) []corpusLine {
	f, err := os.Open("../pkg/policy/testdata/shell_corpus.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []corpusLine
	sc := bufio.NewScanner(f)
	pol, n := "seed000", 0
	for sc.Scan() {
		n++
		l := sc.Text()
		if name, ok := strings.CutPrefix(l, "@policy "); ok {
			pol = strings.TrimSpace(name)
			continue
		}
		src, ok := strings.CutPrefix(l, "allow\t")
		if !ok {
			continue
		}
		src = strings.NewReplacer(`\n`, "\n", `\t`, "\t").Replace(src)
		out = append(out, corpusLine{origin: "corpus:" + strconv.Itoa(n), policy: pol, src: src})
	}
	return out
}

// judgedPrograms are the real paths of the programs the rendered command
// names (builtins run no program).
func judgedPrograms(t *testing.T, run, ws string) []string {
	s, err := shell.Parse(run)
	if err != nil {
		t.Fatalf("the rendered %q does not parse: %v", run, err)
	}
	var out []string
	for _, c := range s.Commands {
		name := c.Name()
		if name == "" || (bashBuiltins[name] && name != "[" && name != "printf" && name != "echo" && name != "pwd" &&
			name != "true" && name != "false" && name != "test" && name != "kill") {
			continue
		}
		p := name
		if !strings.Contains(name, "/") {
			if lp, err := exec.LookPath(name); err == nil {
				p = lp
			}
		} else if !filepath.IsAbs(name) {
			p = filepath.Join(ws, name)
		}
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		out = append(out, p)
		out = append(out, oracleHelpers[filepath.Base(name)]...)
	}
	return out
}

var bashBuiltins = map[string]bool{}

func init() {
	for _, b := range strings.Fields(`: . [ alias bg bind break builtin caller cd command compgen complete compopt continue
		declare dirs disown echo enable eval exec exit export false fc fg getopts hash help history jobs kill let local
		logout mapfile popd printf pushd pwd read readarray readonly return set shift shopt source suspend test times
		trap true type typeset ulimit umask unalias unset wait`) {
		bashBuiltins[b] = true
	}
}

var (
	straceLine = regexp.MustCompile(`^(\d+) +(.*)$`)
	straceExec = regexp.MustCompile(`^execve\("((?:[^"\\]|\\.)*)",.* = 0$`)
	straceOpen = regexp.MustCompile(`^openat\([^,]+, "((?:[^"\\]|\\.)*)", ([A-Z_|]+)(?:, \d+)?\) = \d+<((?:[^>\\]|\\.)*)>$`)
	straceFork = regexp.MustCompile(`^(?:clone3?|v?fork)\(.*\) = (\d+)$`)
	straceMark = regexp.MustCompile(`^openat\([^,]*, "/oracle-mark-(\d+)"`)
)

// runOracleBatch runs cases one after another in one sandbox under strace
// and returns the differences.
func runOracleBatch(t *testing.T, n int, cases []oracleCase, ws string, g *policy.Gate, bashPath, timeoutPath string, shIsBash bool) []string {
	out := t.TempDir()
	var script strings.Builder
	script.WriteString("mkdir -p")
	for i := range cases {
		fmt.Fprintf(&script, " /tmp/home-%d", i)
	}
	script.WriteString("\n")
	for i, c := range cases {
		home := fmt.Sprintf("/tmp/home-%d", i)
		fmt.Fprintf(&script, "cd %s\n: 2>/dev/null </oracle-mark-%d\n", shell.Quote(ws, false), i)
		fmt.Fprintf(&script, "HOME=%s timeout -s KILL 20 %s -c %s </dev/null >/dev/null 2>&1\n", home, bashPath, shell.Quote(c.run, false))
	}
	fmt.Fprintf(&script, ": 2>/dev/null </oracle-mark-%d\nexit 0\n", len(cases))
	driver := filepath.Join(out, "driver.sh")
	trace := filepath.Join(out, "trace")
	if err := os.WriteFile(driver, []byte(script.String()), 0o644); err != nil {
		t.Error(err)
		return nil
	}
	args := []string{"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"}
	if shIsBash {
		// sh is bash, which runs in POSIX mode when named sh: the POSIX
		// dialect the gate parsed the strings of sh in, in the other
		// shell that speaks it.
		for _, sh := range []string{"/bin/sh", "/usr/bin/sh"} {
			if fi, err := os.Lstat(sh); err == nil && !fi.IsDir() {
				args = append(args, "--ro-bind", bashPath, sh)
			}
		}
	}
	cmd := exec.Command("bwrap", append(args,
		"--bind", ws, ws, "--bind", out, out, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
		"--die-with-parent", "--new-session", "--chdir", ws, "--",
		"strace", "-f", "-qq", "-y", "-s", "4096", "-e", "trace=execve,openat,clone,clone3,fork,vfork", "-e", "signal=none", "-o", trace,
		bashPath, driver)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0"}
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("oracle batch %d: %v\n%s", n, err, b)
		return nil
	}
	t.Logf("oracle batch %d: %d commands in %s", n, len(cases), time.Since(start).Round(time.Millisecond))
	f, err := os.Open(trace)
	if err != nil {
		t.Error(err)
		return nil
	}
	defer f.Close()
	diffs, err := readOracleTrace(f, cases, ws, g, bashPath, timeoutPath)
	if err != nil {
		t.Error(err)
	}
	return diffs
}

// readOracleTrace reads a batch's strace output and returns every
// program run and file opened that the gate did not allow.
func readOracleTrace(r io.Reader, cases []oracleCase, ws string, g *policy.Gate, bashPath, timeoutPath string) ([]string, error) {
	var diffs []string
	cur := -1
	prog := map[string]string{} // pid → program it runs
	execd := map[string]bool{}  // pids that ran execve since they were born
	// A child's lines may come before its parent's fork returns (strace
	// prints the parent's "resumed" line late): its opens wait for the
	// program it inherits, and its exec is not undone by the late fork.
	deferred := map[string][]func(prog string){}
	pending := map[string]string{}
	root := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		m := straceLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		pid, rest := m[1], m[2]
		if root == "" {
			root = pid // the driver, traced from its start
		}
		if strings.HasSuffix(rest, " <unfinished ...>") {
			pending[pid] = strings.TrimSuffix(rest, " <unfinished ...>")
			continue
		}
		if strings.HasPrefix(rest, "<... ") {
			if i := strings.Index(rest, "resumed>"); i >= 0 {
				rest = pending[pid] + rest[i+len("resumed>"):]
				delete(pending, pid)
			}
		}
		if mk := straceMark.FindStringSubmatch(rest); mk != nil {
			cur, _ = strconv.Atoi(mk[1])
			continue
		}
		if cur < 0 || cur >= len(cases) {
			continue
		}
		c := cases[cur]
		if f := straceFork.FindStringSubmatch(rest); f != nil {
			child := f[1]
			if !execd[child] {
				prog[child] = prog[pid] // a child runs its parent's program until it execs
			}
			for _, open := range deferred[child] {
				open(prog[pid])
			}
			delete(deferred, child)
			continue
		}
		if e := straceExec.FindStringSubmatch(rest); e != nil {
			p := unescapeStrace(e[1])
			if r, err := filepath.EvalSymlinks(p); err == nil {
				p = r
			}
			prog[pid] = filepath.Base(p)
			execd[pid] = true
			if p == bashPath || p == timeoutPath || judged(c.progs, p) {
				continue
			}
			diffs = append(diffs, fmt.Sprintf("%s [%s] %q\n  ran %q\n  executed %s, which the gate did not judge (judged: %v)", c.origin, c.policy, c.src, c.run, p, c.progs))
			continue
		}
		if o := straceOpen.FindStringSubmatch(rest); o != nil {
			p := unescapeStrace(o[3])
			write := strings.Contains(o[2], "O_WRONLY") || strings.Contains(o[2], "O_RDWR") || strings.Contains(o[2], "O_CREAT")
			if judged(c.progs, p) {
				continue // a script program read by its interpreter
			}
			open := func(prog string) {
				if why := oracleOpen(g, ws, prog, p, write); why != "" {
					diffs = append(diffs, fmt.Sprintf("%s [%s] %q\n  ran %q\n  %s opened %s: %s", c.origin, c.policy, c.src, c.run, prog, p, why))
				}
			}
			if name, known := prog[pid]; known || pid == root {
				open(name)
			} else {
				deferred[pid] = append(deferred[pid], open)
			}
		}
	}
	for _, opens := range deferred { // children whose fork never returned in the trace
		for _, open := range opens {
			open("")
		}
	}
	return diffs, sc.Err()
}

// judged reports whether p is one of the judged programs or lies in a
// judged helper directory.
func judged(progs []string, p string) bool {
	for _, j := range progs {
		if p == j || (strings.HasSuffix(j, "/") && strings.HasPrefix(p, j)) {
			return true
		}
	}
	return false
}

// oracleOpen says why a file a command opened is not one the gate
// allows ("" when it is).
func oracleOpen(g *policy.Gate, ws, prog, p string, write bool) string {
	if p == ws || strings.HasPrefix(p, ws+"/") {
		if write && (strings.HasPrefix(p, ws+"/.git/") || prog == "git") {
			return "" // git's own index and lock files
		}
		tool := "bash"
		if write {
			tool = "write"
		}
		kind, _ := policy.BuiltinKind(tool)
		d := g.CheckPath(policy.Request{Agent: "oracle", Tool: tool, Known: true, Kind: kind, Workspace: ws}, p)
		if d.Action != policy.Allow {
			return fmt.Sprintf("%s by %s (%s)", d.Action, d.Rule, d.Reason)
		}
		return ""
	}
	if strings.HasPrefix(p, "/tmp/") || p == "/tmp" {
		return "" // the sandbox's private /tmp
	}
	for _, r := range oracleRuntime {
		if p == r || p+"/" == r || strings.HasPrefix(p, r) {
			return ""
		}
	}
	if (p == "/etc/passwd" || p == "/etc/group") && oracleNames[prog] {
		return ""
	}
	for _, r := range oracleOwn[prog] {
		if p == r || strings.HasPrefix(p, r) {
			return ""
		}
	}
	if write {
		return "a write outside the workspace"
	}
	d := g.CheckPath(policy.Request{Agent: "oracle", Tool: "bash", Known: true, Kind: policy.KindExecute, Workspace: ws}, p)
	if d.Action != policy.Allow {
		return fmt.Sprintf("%s by %s (%s)", d.Action, d.Rule, d.Reason)
	}
	return ""
}

// unescapeStrace undoes strace's C-style escapes of a path.
func unescapeStrace(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	if u, err := strconv.Unquote(`"` + s + `"`); err == nil {
		return u
	}
	return s
}

// The grammar of generated commands: read-only programs with their
// options and operands, joined by the shell's operators, nested in
// subshells, blocks, sh -c and bash -c, with comments, continuations,
// quotes inside words that look like globs and braces, and the builtins
// and loops that assign names.

var genFiles = []string{"main.go", "README.md", "sub/a.txt", "'a b.txt'", `"a b.txt"`, "data.json", "notes.txt", "b.txt",
	`"main".go`, `'sub'/a.txt`, `./main.go`, `sub/../main.go`, `"README.md"`, `mai"n.go"`, `'[m]ain.go'`, `"{a,b}.txt"`,
	`"*.go"`, `\*.go`, `"sub/[a].txt"`}

var genSimple = []func(r *rand.Rand) string{
	func(r *rand.Rand) string {
		return "ls " + pick(r, "", "-l ", "-la ", "-1 ", "-R ", "-d ", "-A ") + pick(r, ".", "sub", "main.go", "'a b.txt'")
	},
	func(r *rand.Rand) string { return "cat " + pick(r, "", "-n ", "-A ", "-s ") + genFile(r) },
	func(r *rand.Rand) string { return "head " + pick(r, "-n 1 ", "-n1 ", "-c 5 ", "-1 ", "") + genFile(r) },
	func(r *rand.Rand) string { return "tail " + pick(r, "-n 1 ", "-c3 ", "") + genFile(r) },
	func(r *rand.Rand) string { return "wc " + pick(r, "-l ", "-c ", "-w ", "-lw ", "") + genFile(r) },
	func(r *rand.Rand) string {
		return "grep " + pick(r, "", "-n ", "-i ", "-c ", "-v ", "-E ", "-F ", "-e ", "--count ") + pick(r, "a", "'x|y'", `"TODO"`, "main", "'^p'") + " " + genFile(r)
	},
	func(r *rand.Rand) string {
		return "grep -rn " + pick(r, "TODO", "main", "'a'") + " " + pick(r, ".", "sub")
	},
	func(r *rand.Rand) string {
		return "sort " + pick(r, "", "-r ", "-n ", "-u ", "-k1 ", "-t: -k2 ") + genFile(r)
	},
	func(r *rand.Rand) string { return "uniq " + pick(r, "", "-c ", "-d ") + genFile(r) },
	func(r *rand.Rand) string { return "cut " + pick(r, "-d: -f1 ", "-c1-2 ", "-f1 ") + genFile(r) },
	func(r *rand.Rand) string {
		return "sed -n " + pick(r, "1p", "'2p'", `"\$p"`, "'/a/p'", "'s/a/b/p'") + " " + genFile(r)
	},
	func(r *rand.Rand) string {
		return "awk " + pick(r, "'{print $1}'", "'NR==1'", `'{ n++ } END { print n }'`, "-F: '{print $2}'", "'/a/'") + " " + genFile(r)
	},
	func(r *rand.Rand) string {
		return "find " + pick(r, ".", "sub") + pick(r, "", " -name '*.go'", " -type f", " -maxdepth 1", " -name \"*.txt\"")
	},
	func(r *rand.Rand) string {
		return pick(r, "stat ", "file ", "md5sum ", "sha256sum ", "cksum ", "realpath ", "readlink -f ", "du -s ") + genFile(r)
	},
	func(r *rand.Rand) string {
		return pick(r, "od -c ", "xxd ", "strings ", "rev ", "tac ", "nl ", "fold -w 3 ", "expand ") + genFile(r)
	},
	func(r *rand.Rand) string { return "diff " + genFile(r) + " " + genFile(r) },
	func(r *rand.Rand) string { return "cmp " + genFile(r) + " " + genFile(r) },
	func(r *rand.Rand) string {
		return "jq " + pick(r, ".", ".name", "'.list[0]'", "-r .name", "-c .") + " data.json"
	},
	func(r *rand.Rand) string {
		return pick(r, "echo hi", "printf '%s\\n' x", "true", "false", ":", "pwd", "seq 3", "date +%Y", "uname -s", "id -u", "whoami", "basename /a/b", "dirname a/b", "nproc")
	},
	func(r *rand.Rand) string {
		return pick(r, "test -f main.go", "[ -d sub ]", "[[ -e main.go ]]", "test -n x", "[ a = a ]")
	},
	func(r *rand.Rand) string {
		return "git " + pick(r, "status --short", "log --oneline -n 1", "diff --stat", "branch --list", "ls-files", "rev-parse HEAD", "status")
	},
	// Builtins and loops that assign names (lower-case: shell variables
	// no program reads).
	func(r *rand.Rand) string {
		return pick(r, "read -r line < main.go", "read x <<< y", "printf -v out %s x", "getopts ab opt -a", "mapfile -t lines < b.txt",
			"readarray arr < b.txt", "for i in 1 2; do :; done", "for f in main.go b.txt; do wc -l main.go; done",
			"select s in a; do break; done </dev/null", "x=1", "declare y=2", "local z 2>/dev/null || :")
	},
}

func pick(r *rand.Rand, opts ...string) string { return opts[r.Intn(len(opts))] }

func genFile(r *rand.Rand) string { return genFiles[r.Intn(len(genFiles))] }

// genScript generates a command line of nesting depth at most 2.
func genScript(r *rand.Rand, depth int) string {
	simple := func() string {
		s := genSimple[r.Intn(len(genSimple))](r)
		switch r.Intn(8) {
		case 0:
			// A continuation inside the command.
			if i := strings.IndexByte(s, ' '); i > 0 {
				s = s[:i] + " \\\n  " + s[i+1:]
			}
		case 1:
			s += " # " + pick(r, "note", "a 'quote", `"x`, "$(id)", "`id`", "x;y", "ends \\")
		}
		return s
	}
	if depth >= 2 {
		return simple()
	}
	switch r.Intn(12) {
	case 0:
		return simple() + " | " + pick(r, "wc -l", "head -n 1", "sort", "tr a-z A-Z", "cat", "grep a")
	case 1:
		return genScript(r, depth+1) + " && " + genScript(r, depth+1)
	case 2:
		return genScript(r, depth+1) + "; " + genScript(r, depth+1)
	case 3:
		return genScript(r, depth+1) + " || " + genScript(r, depth+1)
	case 4:
		return "( " + genScript(r, depth+1) + " )"
	case 5:
		return "{ " + genScript(r, depth+1) + "; }"
	case 6:
		return pick(r, "sh", "bash", "dash") + " -c " + shell.Quote(genScript(r, depth+1), false)
	case 7:
		return genScript(r, depth+1) + "\n" + pick(r, "# a comment", "  # indented", "") + "\n" + genScript(r, depth+1)
	case 8:
		return "if " + simple() + "; then " + simple() + "; else " + simple() + "; fi"
	case 9:
		return pick(r, "timeout 5 ", "nice ", "env LANG=C ", "command ", "nohup ") + simple()
	}
	return simple()
}

// TestOracleTraceReadsLateForks reads a trace in the order CI printed
// it: timeout's clone returns after its child exec'd bash and curl, and
// curl's resolver thread opens files before its own clone returns. The
// files are curl's, so they make no difference; a file curl may not
// open still does, whichever order the lines come in.
func TestOracleTraceReadsLateForks(t *testing.T) {
	ws := "/ws"
	g := policy.NewGate(policy.Default())
	cases := []oracleCase{{origin: "corpus:1", policy: "builtin", src: "curl https://example.com/x", run: "curl https://example.com/x", progs: []string{"/usr/bin/curl"}}}
	trace := func(secret string) string {
		return `1 execve("/usr/bin/bash", ["bash", "driver.sh"], 0x0 /* 3 vars */) = 0
1 openat(AT_FDCWD, "/oracle-mark-0", O_RDONLY) = -1 ENOENT (No such file or directory)
1 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f) = 7
7 execve("/usr/bin/timeout", ["timeout", "-s", "KILL", "20", "/usr/bin/bash", "-c", "curl https://example.com/x"], 0x0 /* 3 vars */) = 0
7 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f <unfinished ...>
8 execve("/usr/bin/bash", ["/usr/bin/bash", "-c", "curl https://example.com/x"], 0x0 /* 3 vars */) = 0
8 execve("/usr/bin/curl", ["curl", "https://example.com/x"], 0x0 /* 3 vars */) = 0
8 clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD, child_tid=0x7f, parent_tid=0x7f, exit_signal=0, stack=0x7f, stack_size=0x7ff, tls=0x7f} <unfinished ...>
9 openat(AT_FDCWD, "/etc/resolv.conf", O_RDONLY|O_CLOEXEC) = 5</etc/resolv.conf>
8 <... clone3 resumed> => {parent_tid=[9]}, 88) = 9
9 openat(AT_FDCWD, "/etc/hosts", O_RDONLY|O_CLOEXEC) = 5</etc/hosts>
9 openat(AT_FDCWD, "` + secret + `", O_RDONLY|O_CLOEXEC) = 5<` + secret + `>
7 <... clone resumed>) = 8
8 openat(AT_FDCWD, "/etc/host.conf", O_RDONLY|O_CLOEXEC) = 6</etc/host.conf>
1 openat(AT_FDCWD, "/oracle-mark-1", O_RDONLY) = -1 ENOENT (No such file or directory)
`
	}
	diffs, err := readOracleTrace(strings.NewReader(trace("/etc/hosts")), cases, ws, g, "/usr/bin/bash", "/usr/bin/timeout")
	if err != nil || len(diffs) != 0 {
		t.Errorf("curl's own files read as differences: %v %q", err, diffs)
	}
	diffs, err = readOracleTrace(strings.NewReader(trace("/etc/shadow")), cases, ws, g, "/usr/bin/bash", "/usr/bin/timeout")
	if err != nil || len(diffs) != 1 || !strings.Contains(diffs[0], "curl opened /etc/shadow") {
		t.Errorf("a file curl may not open: %v %q, want one difference naming curl", err, diffs)
	}
}
