package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"

	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
)

// How a README command is run.
type runMode int

const (
	// runs to its end; its exit code and output are checked.
	modeRun runMode = iota
	// serves until the test ends (a worker, the approver): ready when its
	// output matches.
	modeServe
	// starts, shows it is under way (its output matches), and must end by
	// itself later in the walk-through, by the step named in endsAfter.
	modeBackground
	// follows until interrupted: interrupted once its output matches, then
	// must exit 0.
	modeFollow
)

// readmeStep is what a README command must do.
type readmeStep struct {
	mode runMode
	code int    // exit code (modeRun, and modeBackground at its end)
	out  string // regexp the output (stdout and stderr) must match
	// endOut is what the output of a modeBackground command matches once
	// it has ended (with exit code code).
	endOut string
	// in is the command's standard input; a modeServe command's stays
	// open while it serves.
	in string
	// files are written into the workspace before the command runs
	// ({{BIN}} is the directory of the built binaries): what the README
	// assumes the reader has, such as an mcpServers file.
	files map[string]string
}

// mcpHello is what an MCP client says first on stdio: initialize, then
// list the tools.
const mcpHello = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"readme","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}
`

// readmeMCPConfig serves the first worker's tools to the worker started
// with --mcp-config through toolctl mcp, a stdio MCP server; the state
// directory lets it mint its agent's credentials.
const readmeMCPConfig = `{"mcpServers": {"gate": {"command": "{{BIN}}/toolctl", "args": ["mcp", "--agent", "nested"],
  "env": {"NATS_URL": "${NATS_URL}", "` + identity.EnvStateDir + `": "${` + identity.EnvStateDir + `}"}}}}
`

// readmeSteps holds an expectation for every shell command of README.md,
// keyed by the command as written (comments dropped). A command the README
// gains without an entry here fails the test.
var readmeSteps = map[string]readmeStep{
	"go run ./cmd/toolctl audit --tool bash":                               {out: `execution\s+toolctl/bash`},
	"go run ./cmd/toolctl budgets":                                         {out: `no budget has been used`},
	"go run ./cmd/toolctl creds agent agent-7":                             {out: `(?m)^/\S+/creds/agent-agent-7\.creds$`},
	`go run ./cmd/toolctl creds approver alice --out "$state/alice.creds"`: {out: `wrote approver credentials for "alice" to \S+/toolgate/alice\.creds`},
	"go run ./cmd/toolctl nats-config":                                     {out: `wrote /\S+/nats/auth\.conf`},
	"go run ./cmd/toolctl creds agent ci-bot --expires 24h":                {out: `wrote agent credentials for "ci-bot" to /\S+/creds/agent-ci-bot\.creds \(mode 0600\)`},
	"go run ./cmd/toolctl creds revoke agent agent-7":                      {out: `revoked U[A-Z0-9]+: the embedded server refuses it`},
	"go run ./cmd/worker":                                                  {mode: modeServe, out: `worker taking calls`},
	"go run ./cmd/toolctl call read path=README.md":                        {out: `(?m)^\s+1\t# toolgate$`},
	"go run ./cmd/toolctl tools":                                           {out: `(?m)^read \(read_file\)`},
	"go run ./cmd/toolctl call ls":                                         {out: `README\.md`},
	"go run ./cmd/toolctl call grep pattern=toolgate output_mode=content":  {out: `README\.md:1:# toolgate`},
	"go run ./cmd/toolctl call bash command='uname -a'":                    {out: `Linux`},
	`go run ./cmd/toolctl call --json '{"path":"README.md","limit":3}' read`: {
		out: `(?s)^\s+1\t# toolgate\n.*\s+3\t.*limit reached: showing lines 1-3`},
	"go run ./cmd/toolctl events --follow":                      {mode: modeFollow, out: `dev\.toolgate\.call\.completed\.v1`},
	`mkdir -p "$conf"`:                                          {out: `^$`},
	`go run ./cmd/toolctl policy default > "$conf/policy.yaml"`: {out: `^$`},
	`go run ./cmd/toolctl policy lint "$conf/policy.yaml"`:      {out: `/toolgate/policy\.yaml: valid, revision \w+, 0 warning\(s\)`},
	`go run ./cmd/worker --policy "$conf/policy.yaml"`: {mode: modeServe, // a second worker, on the first one's bus
		out: `(?s)toolgate: using NATS at nats://127\.0\.0\.1:\d+.*toolgate: policy file:\S+/toolgate/policy\.yaml.*worker taking calls`},
	`go run ./cmd/toolctl policy push "$conf/policy.yaml"`: {out: `pushed \S+/toolgate/policy\.yaml as the shared policy, revision \w+`},
	`go run ./cmd/toolctl policy check --policy "$conf/policy.yaml" --tool bash --args '{"command":"ls && rm -rf /"}'`: {
		out: `"action":"(ask|deny)"`}, // the built-in policy asks; never allow
	"go run ./cmd/approver": {mode: modeServe, out: `approver: page and API at (http://\S+)`},
	"go run ./cmd/toolctl call bash command='git push'": {mode: modeBackground, out: `call (\S+) is parked`,
		code: 1, endOut: `status (error|ok)`},
	"go run ./cmd/toolctl mcp --agent claude-code": {mode: modeServe, in: mcpHello,
		out: `"id":2,"result":\{.*"tools":\[.*"name":"read"`},
	"go run ./cmd/toolctl creds token claude-code":    {out: `(?m)^/\S+/creds/agent-claude-code\.token$`},
	"go run ./cmd/worker --mcp-listen 127.0.0.1:8471": {mode: modeServe, out: `MCP \(Streamable HTTP\) on http://127\.0\.0\.1:\d+/mcp as the agent of each bearer token`},
	`go run ./cmd/worker --mcp-config "$conf/mcp.json"`: {mode: modeServe, files: map[string]string{"$conf/mcp.json": readmeMCPConfig},
		out: `(?s)MCP servers \[gate\].*mcp tools.*mcp__gate__read`}, // the first worker's read, through toolctl mcp
	"go run ./cmd/toolctl tools --format openai": {out: `"type":\s*"function"(?s).*"name":\s*"read"`},
	`go run ./cmd/toolctl creds tool word_count --out "$state/word_count.creds"`: {
		out: `wrote tool credentials for "word_count" to \S+/toolgate/word_count\.creds`},
	`go run ./examples/remote-tool-go --creds "$state/word_count.creds"`: {mode: modeServe, out: `serving word_count`},
	"go run ./cmd/toolctl approvals list":                                {out: `{{CALL_ID}}\s+toolctl\s+bash`},
	`echo '{"tool_name":"Bash","tool_input":{"command":"git status"}}' | toolctl hook claude --agent claude-code`: {
		out: `"permissionDecision":\s*"allow"`},
	`go run ./cmd/toolctl approvals approve CALL_ID --comment "looks right"`: {out: `{{CALL_ID}}: `},
}

// readmeExempt are README commands the test does not run, and why.
var readmeExempt = map[string]string{
	"go test -timeout 30m ./...":                    "the test suite itself",
	"cd test/browser && go test -timeout 15m ./...": "the browser tests, run by .ci/run",
}

// readmeInstall is the README's install line: the test runs it first,
// into a directory of its own ($GOBIN), and puts that directory first on
// the PATH of every command, as the reader's shell has it.
const readmeInstall = "go install ./cmd/..."

// defaultStep is the expectation of a README command readmeSteps does not
// list, so that the walk-through follows a README others change: a worker
// or the approver serves until its ready line, anything else runs to exit
// code 0.
func defaultStep(line string) readmeStep {
	switch {
	case strings.Contains(line, "cmd/worker") || strings.HasPrefix(line, "worker"):
		return readmeStep{mode: modeServe, out: `worker taking calls`}
	case strings.Contains(line, "cmd/approver") || strings.HasPrefix(line, "approver"):
		return readmeStep{mode: modeServe, out: `approver: page and API at (http://\S+)`}
	}
	return readmeStep{out: `(?s).*`}
}

// TestReadmeCommands runs every shell command of README.md in order, as a
// newcomer would in one session, against the binaries its install line
// builds (worker, toolctl, approver; the remote tool example is built
// too). The commands share one workspace holding README.md and one
// environment, and what the README starts keeps running: later workers
// join the first one's bus, as extra workers, while it serves. The test
// adds only what keeps it apart from other tests: the first worker and the
// approver listen on random ports (--listen) with the worker's store in a
// temp directory (--data), and the commands after them find them through
// NATS_URL and TOOLGATE_APPROVER, as the README's defaults would. CALL_ID
// is the id of the call the README parks. A command readmeSteps does not
// list is checked by defaultStep; a pipeline or other shell syntax runs
// in bash.
func TestReadmeCommands(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := shellLines(string(readme))
	if len(lines) < 10 {
		t.Fatalf("found only %d commands in README.md", len(lines))
	}
	if !slices.Contains(lines, readmeInstall) {
		t.Fatalf("README.md lacks its install line %q", readmeInstall)
	}
	bin := t.TempDir()
	install := exec.Command("go", "install", "./cmd/...")
	install.Dir = ".."
	install.Env = append(os.Environ(), "GOBIN="+bin)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", readmeInstall, err, out)
	}
	build := exec.Command("go", "build", "-o", bin, "../examples/remote-tool-go")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), string(readme))

	// The reader's HOME is one of the test's own: a README path under ~
	// lands there, not in the HOME of whoever runs the tests.
	// Its state and configuration are where a newcomer's are: under that
	// HOME, not the test binary's own directories.
	home := t.TempDir()
	r := &readmeRun{t: t, bin: bin, ws: ws, vars: map[string]string{},
		env: []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + home,
			identity.EnvStateDir + "=", "XDG_STATE_HOME=" + filepath.Join(home, ".local", "state"),
			"XDG_CONFIG_HOME=" + filepath.Join(home, ".config")}}
	ran := 0
	for _, line := range lines {
		if why, ok := readmeExempt[line]; ok {
			t.Logf("not run: %s (%s)", line, why)
			continue
		}
		if line == readmeInstall {
			t.Logf("ok: %s (run first, into %s)", line, bin)
			continue
		}
		if r.assign(line) {
			continue
		}
		step, ok := readmeSteps[line]
		if ok {
			ran++
		} else {
			step = defaultStep(line)
			t.Logf("%s: not in readmeSteps, checked as %+v", line, step)
		}
		r.step(line, step)
	}
	r.finish()
	if ran != len(readmeSteps) {
		t.Errorf("ran %d README commands, readmeSteps expects %d: is an entry stale?", ran, len(readmeSteps))
	}

	// What a newcomer gets wrong: a file given without its flag is
	// refused, not ignored.
	for _, prog := range []string{"worker", "approver"} {
		cmd := exec.Command(filepath.Join(bin, prog), "policy.yaml")
		cmd.Dir = ws
		out, err := cmd.CombinedOutput()
		if exitCode(err) != 2 || !strings.Contains(string(out), `unexpected argument "policy.yaml"`) {
			t.Errorf("%s policy.yaml: exit %d:\n%s", prog, exitCode(err), out)
		}
		// Help asked for is printed on stdout.
		help := exec.Command(filepath.Join(bin, prog), "--help")
		var stderr bytes.Buffer
		help.Stderr = &stderr
		out, err = help.Output()
		if err != nil || !strings.Contains(string(out), "-listen") || stderr.Len() != 0 {
			t.Errorf("%s --help: %v\nstdout: %s\nstderr: %s", prog, err, out, &stderr)
		}
	}
}

// shellLines returns the commands of the ```sh blocks of a Markdown text,
// with comments dropped.
func shellLines(md string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(md, "\n") {
		switch {
		case strings.HasPrefix(l, "```sh"):
			in = true
		case strings.HasPrefix(l, "```"):
			in = false
		case in:
			if cmd := stripComment(l); cmd != "" {
				out = append(out, cmd)
			}
		}
	}
	return out
}

// stripComment drops a trailing # comment: a # that starts a word outside
// quotes.
func stripComment(l string) string {
	var q rune
	for i, c := range l {
		switch {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '\'' || c == '"':
			q = c
		case c == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
			return strings.TrimSpace(l[:i])
		}
	}
	return strings.TrimSpace(l)
}

// readmeRun is the walk-through in progress.
type readmeRun struct {
	t    *testing.T
	bin  string
	ws   string
	env  []string
	vars map[string]string // CALL_ID
	bg   []*bgProc
	// natsURL is where the first worker listens, once it does.
	natsURL string
}

// assign does what the shell does with a line of assignments only
// (conf=${XDG_CONFIG_HOME:-$HOME/.config}/toolgate): bash computes each
// value in the walk-through's environment, and the later commands see
// it as a variable. It reports whether line was one.
func (r *readmeRun) assign(line string) bool {
	r.t.Helper()
	f, err := syntax.NewParser().Parse(strings.NewReader(line), "README.md")
	if err != nil || len(f.Stmts) != 1 {
		return false
	}
	call, ok := f.Stmts[0].Cmd.(*syntax.CallExpr)
	if !ok || len(call.Args) > 0 || len(call.Assigns) == 0 {
		return false
	}
	for _, a := range call.Assigns {
		cmd, out := r.command([]string{"bash", "-c", line + `; printf %s "$` + a.Name.Value + `"`})
		if err := cmd.Run(); err != nil {
			r.t.Fatalf("%s: %v\n%s", line, err, out)
		}
		r.env = append(r.env, a.Name.Value+"="+out.String())
		r.t.Logf("ok: %s (%s=%s)", line, a.Name.Value, out)
	}
	return true
}

// lookup is a variable of the walk-through's environment.
func (r *readmeRun) lookup(name string) string {
	for i := len(r.env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(r.env[i], "="); ok && k == name {
			return v
		}
	}
	return os.Getenv(name)
}

// bgProc is a command left running.
type bgProc struct {
	line string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
	step readmeStep
}

// argv parses a README line the way a shell would: words with quotes
// removed, and a "> file" redirection. A line that is not one simple
// command (a pipeline, a list) is run by bash: args is bash -c line.
func (r *readmeRun) argv(line string) (args []string, stdoutFile string) {
	r.t.Helper()
	for k, v := range r.vars {
		line = strings.ReplaceAll(line, k, v)
	}
	f, err := syntax.NewParser().Parse(strings.NewReader(line), "README.md")
	if err != nil || len(f.Stmts) != 1 {
		r.t.Fatalf("%s: not one shell command: %v", line, err)
	}
	st := f.Stmts[0]
	call, ok := st.Cmd.(*syntax.CallExpr)
	// What only a shell does ($VAR, ~, pipelines, lists) is left to bash,
	// with the README's go run lines running the installed binaries.
	if !ok || len(call.Assigns) > 0 || st.Background || strings.Contains(line, "$") || strings.Contains(line, "~") {
		return []string{"bash", "-c", strings.NewReplacer("go run ./cmd/", "", "go run ./examples/", "").Replace(line)}, ""
	}
	for _, w := range call.Args {
		s, err := expand.Literal(nil, w)
		if err != nil {
			return []string{"bash", "-c", line}, ""
		}
		args = append(args, s)
	}
	for _, rd := range st.Redirs {
		if rd.Op != syntax.RdrOut {
			return []string{"bash", "-c", line}, ""
		}
		stdoutFile, _ = expand.Literal(nil, rd.Word)
	}
	// go run ./cmd/X (or ./examples/X) → the binary built once; so is a
	// program the install line put on PATH.
	var prog string
	switch {
	case len(args) >= 3 && args[0] == "go" && args[1] == "run" && (strings.HasPrefix(args[2], "./cmd/") || strings.HasPrefix(args[2], "./examples/")):
		prog, args = filepath.Base(args[2]), args[3:]
	case len(args) >= 1 && slices.Contains([]string{"worker", "toolctl", "approver"}, args[0]):
		prog, args = args[0], args[1:]
	default:
		return []string{"bash", "-c", line}, ""
	}
	args = append([]string{filepath.Join(r.bin, prog)}, args...)
	switch prog {
	case "worker":
		for i := range args {
			if i > 0 && args[i-1] == "--mcp-listen" {
				args[i] = "127.0.0.1:0" // a free port, as for --listen
			}
		}
		// The first worker serves the bus; the others join it through
		// NATS_URL, as extra workers, while it runs.
		if r.natsURL == "" {
			args = append(args, "--listen", "127.0.0.1:0", "--data", r.t.TempDir())
		}
	case "approver":
		args = append(args, "--listen", "127.0.0.1:0")
	}
	return args, stdoutFile
}

func (r *readmeRun) command(args []string) (*exec.Cmd, *syncBuffer) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = r.ws
	cmd.Env = append(os.Environ(), r.env...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	return cmd, out
}

func (r *readmeRun) step(line string, s readmeStep) {
	t := r.t
	t.Helper()
	args, toFile := r.argv(line)
	want := regexp.MustCompile(r.subst(s.out))
	for name, content := range s.files {
		name = os.Expand(name, r.lookup)
		if !filepath.IsAbs(name) {
			name = filepath.Join(r.ws, name)
		}
		writeFile(t, name, strings.ReplaceAll(content, "{{BIN}}", r.bin))
	}
	switch s.mode {
	case modeRun:
		cmd, out := r.command(args)
		cmd.Stdin = strings.NewReader(s.in)
		var stdout bytes.Buffer
		if toFile != "" {
			cmd.Stdout = &stdout
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		err := runCtx(ctx, cmd)
		code := exitCode(err)
		if toFile != "" {
			writeFile(t, filepath.Join(r.ws, toFile), stdout.String())
		}
		if code != s.code || !want.MatchString(out.String()) {
			t.Fatalf("%s\nexit %d (want %d), output does not match %q:\n%s", line, code, s.code, want, out)
		}
		t.Logf("ok: %s", line)
	case modeServe, modeBackground, modeFollow:
		cmd, out := r.command(args)
		var stdin io.WriteCloser
		if s.in != "" {
			var err error
			if stdin, err = cmd.StdinPipe(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if stdin != nil {
			if _, err := io.WriteString(stdin, s.in); err != nil {
				t.Fatalf("%s: stdin: %v", line, err)
			}
			t.Cleanup(func() { stdin.Close() })
		}
		p := &bgProc{line: line, cmd: cmd, out: out, done: make(chan error, 1), step: s}
		go func() { p.done <- cmd.Wait() }()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
			}
		})
		m := r.await(p, want)
		switch {
		case s.mode == modeFollow:
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			if err := r.wait(p); err != nil {
				t.Fatalf("%s: after an interrupt: %v\n%s", line, err, out)
			}
		case filepath.Base(args[0]) == "worker" && r.natsURL == "":
			// The first worker is the one toolctl talks to.
			u := regexp.MustCompile(`listening on (nats://\S+)`).FindStringSubmatch(out.String())
			if u == nil {
				t.Fatalf("%s: does not say where it listens:\n%s", line, out)
			}
			r.natsURL = u[1]
			r.env = append(r.env, "NATS_URL="+u[1])
		case filepath.Base(args[0]) == "approver":
			r.env = append(r.env, "TOOLGATE_APPROVER="+m[1])
		case s.mode == modeBackground:
			if len(m) > 1 {
				r.vars["CALL_ID"] = m[1]
			}
			r.bg = append(r.bg, p)
		}
		t.Logf("ok: %s", line)
	}
}

// finish waits for the commands left running in the background to end by
// themselves, with the outcome their step names.
func (r *readmeRun) finish() {
	for _, p := range r.bg {
		err := r.wait(p)
		want := regexp.MustCompile(p.step.endOut)
		if code := exitCode(err); code != p.step.code || !want.MatchString(p.out.String()) {
			r.t.Fatalf("%s: ended with exit %d (want %d), output does not match %q:\n%s", p.line, code, p.step.code, want, p.out)
		}
		r.t.Logf("ok: %s (ended)", p.line)
	}
}

func (r *readmeRun) subst(re string) string {
	for k, v := range r.vars {
		re = strings.ReplaceAll(re, "{{"+k+"}}", regexp.QuoteMeta(v))
	}
	return re
}

// await waits until p's output matches want, failing the test if p ends
// first or the generous deadline passes.
func (r *readmeRun) await(p *bgProc, want *regexp.Regexp) []string {
	r.t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		changed := p.out.changed() // before looking, so no write is missed
		if m := want.FindStringSubmatch(p.out.String()); m != nil {
			return m
		}
		select {
		case err := <-p.done:
			p.done <- err
			if m := want.FindStringSubmatch(p.out.String()); m != nil {
				return m
			}
			r.t.Fatalf("%s: ended (%v) before its output matched %q:\n%s", p.line, err, want, p.out)
		case <-changed:
		case <-deadline:
			r.t.Fatalf("%s: output never matched %q:\n%s", p.line, want, p.out)
		}
	}
}

func (r *readmeRun) wait(p *bgProc) error {
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(2 * time.Minute):
		r.t.Fatalf("%s: did not end:\n%s", p.line, p.out)
		return nil
	}
}

func runCtx(ctx context.Context, cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("killed: %w", ctx.Err())
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// syncBuffer is an output buffer safe to read while a process writes it,
// with a signal on each write.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	ch  chan struct{}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// changed returns a channel closed at the next write.
func (b *syncBuffer) changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

var _ io.Writer = (*syncBuffer)(nil)
