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
	"go run ./cmd/toolctl audit --tool bash":                              {out: `execution\s+toolctl/bash`},
	"go run ./cmd/toolctl budgets":                                        {out: `no budget has been used`},
	"go run ./cmd/toolctl creds agent agent-7":                            {out: `(?m)^/\S+/creds/agent-agent-7\.creds$`},
	"go run ./cmd/toolctl creds approver alice --out alice.creds":         {out: `wrote approver credentials for "alice" to alice\.creds`},
	"go run ./cmd/toolctl nats-config":                                    {out: `wrote /\S+/nats/auth\.conf`},
	"go run ./cmd/toolctl creds agent ci-bot --expires 24h":               {out: `wrote agent credentials for "ci-bot" to /\S+/creds/agent-ci-bot\.creds \(mode 0600\)`},
	"go run ./cmd/toolctl creds revoke agent agent-7":                     {out: `revoked U[A-Z0-9]+: the embedded server refuses it`},
	"go run ./cmd/worker":                                                 {mode: modeServe, out: `worker taking calls`},
	"go run ./cmd/toolctl call read path=README.md":                       {out: `(?m)^\s+1\t# toolgate$`},
	"go run ./cmd/toolctl tools":                                          {out: `(?m)^read \(read_file\)`},
	"go run ./cmd/toolctl call ls":                                        {out: `README\.md`},
	"go run ./cmd/toolctl call grep pattern=toolgate output_mode=content": {out: `README\.md:1:# toolgate`},
	"go run ./cmd/toolctl call bash command='uname -a'":                   {out: `Linux`},
	`go run ./cmd/toolctl call --json '{"path":"README.md","limit":3}' read`: {
		out: `(?s)^\s+1\t# toolgate\n.*\s+3\t.*limit reached: showing lines 1-3`},
	"go run ./cmd/toolctl events --follow":              {mode: modeFollow, out: `dev\.toolgate\.call\.completed\.v1`},
	"go run ./cmd/toolctl policy default > policy.yaml": {out: `^$`},
	"go run ./cmd/toolctl policy lint policy.yaml":      {out: `policy\.yaml: valid, revision \w+, 0 warning\(s\)`},
	"go run ./cmd/worker --policy policy.yaml":          {mode: modeServe, out: `toolgate: policy file:policy\.yaml`},
	"go run ./cmd/toolctl policy push policy.yaml":      {out: `pushed policy\.yaml as the shared policy, revision \w+`},
	`go run ./cmd/toolctl policy check --policy policy.yaml --tool bash --args '{"command":"ls && rm -rf /"}'`: {
		out: `"action":"(ask|deny)"`}, // the built-in policy asks; never allow
	"go run ./cmd/approver": {mode: modeServe, out: `approver: page and API at (http://\S+)`},
	"go run ./cmd/toolctl call bash command='git push'": {mode: modeBackground, out: `call (\S+) is parked`,
		code: 1, endOut: `status (error|ok)`},
	"go run ./cmd/toolctl mcp --agent claude-code": {mode: modeServe, in: mcpHello,
		out: `"id":2,"result":\{.*"tools":\[.*"name":"read"`},
	"go run ./cmd/toolctl creds token claude-code":    {out: `(?m)^/\S+/creds/agent-claude-code\.token$`},
	"go run ./cmd/worker --mcp-listen 127.0.0.1:8471": {mode: modeServe, out: `MCP \(Streamable HTTP\) on http://127\.0\.0\.1:\d+/mcp as the agent of each bearer token`},
	"go run ./cmd/worker --mcp-config mcp.json": {mode: modeServe, files: map[string]string{"mcp.json": readmeMCPConfig},
		out: `(?s)MCP servers \[gate\].*mcp tools.*mcp__gate__read`}, // the first worker's read, through toolctl mcp
	"go run ./cmd/toolctl tools --format openai":                             {out: `"type":\s*"function"(?s).*"name":\s*"read"`},
	"go run ./cmd/toolctl creds tool word_count --out word_count.creds":      {out: `wrote tool credentials for "word_count" to word_count\.creds`},
	"go run ./examples/remote-tool-go --creds word_count.creds":              {mode: modeServe, out: `serving word_count`},
	"go run ./cmd/toolctl approvals list":                                    {out: `{{CALL_ID}}\s+toolctl\s+bash`},
	`go run ./cmd/toolctl approvals approve CALL_ID --comment "looks right"`: {out: `{{CALL_ID}}: `},
}

// readmeExempt are README commands the test does not run, and why.
var readmeExempt = map[string]string{
	"go test ./...":                    "the test suite itself",
	"cd test/browser && go test ./...": "the browser tests, run by .ci/run",
}

// TestReadmeCommands runs every shell command of README.md in order, as a
// newcomer would, against real binaries built once: a worker, toolctl and
// the approver. Each command runs in a fresh workspace holding README.md;
// the test adds only what keeps it apart from other tests: the worker and
// approver listen on random ports (--listen) with their data in temp
// directories (--data), and toolctl finds them through NATS_URL and
// TOOLGATE_APPROVER. CALL_ID is the id of the call the README parks.
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
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin, "../cmd/worker", "../cmd/toolctl", "../cmd/approver", "../examples/remote-tool-go")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), string(readme))

	r := &readmeRun{t: t, bin: bin, ws: ws, vars: map[string]string{}}
	ran := 0
	for _, line := range lines {
		if why, ok := readmeExempt[line]; ok {
			t.Logf("not run: %s (%s)", line, why)
			continue
		}
		step, ok := readmeSteps[line]
		if !ok {
			t.Fatalf("README.md command %q has no expectation in readmeSteps (or readmeExempt)", line)
		}
		r.step(line, step)
		ran++
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
// removed, and a "> file" redirection.
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
	if !ok || len(call.Assigns) > 0 {
		r.t.Fatalf("%s: not a simple command", line)
	}
	for _, w := range call.Args {
		s, err := expand.Literal(nil, w)
		if err != nil {
			r.t.Fatalf("%s: %v", line, err)
		}
		args = append(args, s)
	}
	for _, rd := range st.Redirs {
		if rd.Op != syntax.RdrOut {
			r.t.Fatalf("%s: only > redirections are supported", line)
		}
		stdoutFile, _ = expand.Literal(nil, rd.Word)
	}
	// go run ./cmd/X (or ./examples/X) → the binary built once.
	if len(args) < 3 || args[0] != "go" || args[1] != "run" || !strings.HasPrefix(args[2], "./cmd/") && !strings.HasPrefix(args[2], "./examples/") {
		r.t.Fatalf("%s: not a go run ./cmd/... command", line)
	}
	prog := filepath.Base(args[2])
	args = append([]string{filepath.Join(r.bin, prog)}, args[3:]...)
	switch prog {
	case "worker":
		for i := range args {
			if i > 0 && args[i-1] == "--mcp-listen" {
				args[i] = "127.0.0.1:0" // a free port, as for --listen
			}
		}
		args = append(args, "--listen", "127.0.0.1:0", "--data", r.t.TempDir())
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
		writeFile(t, filepath.Join(r.ws, name), strings.ReplaceAll(content, "{{BIN}}", r.bin))
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
		case strings.Contains(line, "cmd/worker") && len(r.env) == 0:
			// The first worker is the one toolctl talks to.
			u := regexp.MustCompile(`listening on (nats://\S+)`).FindStringSubmatch(out.String())
			if u == nil {
				t.Fatalf("%s: does not say where it listens:\n%s", line, out)
			}
			r.env = append(r.env, "NATS_URL="+u[1])
		case strings.Contains(line, "cmd/approver"):
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
