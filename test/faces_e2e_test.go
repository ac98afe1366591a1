package test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bearer"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
)

// buildBinaries builds the named commands (../cmd/NAME) into a directory
// of the test's.
func buildBinaries(t *testing.T, names ...string) string {
	t.Helper()
	bin := t.TempDir()
	args := []string{"build", "-o", bin}
	for _, n := range names {
		args = append(args, "../cmd/"+n)
	}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// nobody is the uid and gid of the second local user the attacks run as.
const nobody = 65534

// asOtherUser makes cmd run as another local user (uid 65534, no groups,
// no credentials of any kind) when the test runs as root; otherwise it
// runs as the test's user, which holds no token either.
func asOtherUser(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	} else {
		t.Logf("not root: the request comes from this user, without a token")
	}
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	return cmd
}

// rawPost POSTs body to url with curl, as another local user, with the
// headers given ("Name: value"), and returns the status, the response
// headers and the body.
func rawPost(t *testing.T, url, body string, headers ...string) (int, http.Header, string) {
	t.Helper()
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not found: install the Debian package curl")
	}
	args := []string{"-s", "-i", "--max-time", "20", "-X", "POST", "--data-binary", body,
		"-H", "Content-Type: application/json", "-H", "Accept: application/json, text/event-stream"}
	for _, h := range headers {
		args = append(args, "-H", h)
	}
	out, err := asOtherUser(t, exec.Command(curl, append(args, url)...)).Output()
	if err != nil && len(out) == 0 {
		t.Fatalf("curl %s: %v", url, err)
	}
	r := bufio.NewReader(strings.NewReader(string(out)))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("curl %s: %v\n%s", url, err, out)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	return resp.StatusCode, resp.Header, b.String()
}

// startBinary runs bin with args and env added, and returns once its
// output matches ready, with the first submatch.
func startBinary(t *testing.T, env []string, ready string, bin string, args ...string) (*exec.Cmd, *syncBuffer, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	re := regexp.MustCompile(ready)
	deadline := time.After(2 * time.Minute)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return cmd, out, m[len(m)-1]
		}
		select {
		case <-done:
			t.Fatalf("%s exited before it was ready:\n%s", filepath.Base(bin), out)
		case <-deadline:
			t.Fatalf("%s not ready:\n%s", filepath.Base(bin), out)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// bearerTransport adds a bearer token to every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

const mcpInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"intruder","version":"1"}}}`

// mcpAttack is what a local user without a token tries on an MCP face:
// open a session (with header, if any) and, whatever the answer, write a
// file into the workspace. It returns the status of each request.
func mcpAttack(t *testing.T, url, path string, header ...string) []int {
	t.Helper()
	code, h, _ := rawPost(t, url, mcpInit, header...)
	codes := []int{code}
	if code == http.StatusUnauthorized && h.Get("WWW-Authenticate") == "" {
		t.Errorf("401 without a WWW-Authenticate challenge")
	}
	if sid := h.Get("Mcp-Session-Id"); sid != "" {
		header = append(header, "Mcp-Session-Id: "+sid, "Mcp-Protocol-Version: 2025-06-18")
	}
	code, _, _ = rawPost(t, url, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, header...)
	codes = append(codes, code)
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"write","arguments":{"path":` + strconv.Quote(path) + `,"content":"pwned"}}}`
	code, _, body := rawPost(t, url, call, header...)
	t.Logf("tools/call: %d %.200s", code, body)
	return append(codes, code)
}

// TestMCPFaceAsksWhoIsThere: another local user without a token cannot
// open a session on the worker's MCP face (401 with a challenge), and the
// write it then tries never happens; a wrong token fares the same. Each
// agent's token serves that agent, on sessions of its own. Without any
// token the face does not start, unless --mcp-insecure-loopback says so
// on a loopback address.
func TestMCPFaceAsksWhoIsThere(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	bin := buildBinaries(t, "worker", "toolctl")
	state := stateTempDir(t)
	env := []string{identity.EnvStateDir + "=" + state}
	ws := newWorkspace(t)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, "tools:\n  default: allow\n")
	tokens := filepath.Join(state, "tokens")
	if _, err := bearer.Mint(tokens, "alice"); err != nil {
		t.Fatal(err)
	}
	worker := func(extra ...string) []string {
		return append([]string{"--mcp-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--data", t.TempDir(),
			"--workspace", ws, "--policy", pol}, extra...)
	}
	_, out, url := startBinary(t, env, `MCP \(Streamable HTTP\) on (http://\S+/mcp)`, filepath.Join(bin, "worker"), worker()...)
	eventuallyOut(t, out, "worker taking calls")

	marker := filepath.Join(ws, "PWNED")
	for name, header := range map[string][]string{
		"no token":           nil,
		"a made-up token":    {"Authorization: Bearer tg1.alice.bm90LWEtcmVhbC10b2tlbi1hdC1hbGwtbm90LW9uZQ"},
		"not a bearer token": {"Authorization: Basic YWxpY2U6YWxpY2U="},
	} {
		codes := mcpAttack(t, url, "PWNED", header...)
		for _, c := range codes {
			if c != http.StatusUnauthorized {
				t.Errorf("%s: statuses %v, want 401 for every request", name, codes)
				break
			}
		}
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a request without a valid token wrote a file: %s exists (%v)", marker, err)
	}

	// Tokens minted by toolctl: each serves its own agent.
	token := func(agent string) string {
		cmd := exec.Command(filepath.Join(bin, "toolctl"), "creds", "token", agent)
		cmd.Env = append(os.Environ(), env...)
		o, err := cmd.Output()
		if err != nil {
			t.Fatalf("creds token %s: %v", agent, err)
		}
		b, err := os.ReadFile(strings.TrimSpace(string(o)))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sessions := map[string]*mcp.ClientSession{}
	for _, agent := range []string{"alice", "bob"} {
		c := mcp.NewClient(&mcp.Implementation{Name: agent, Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url,
			HTTPClient: &http.Client{Transport: bearerTransport{token(agent)}}}, nil)
		if err != nil {
			t.Fatalf("%s: %v", agent, err)
		}
		defer cs.Close()
		if in := cs.InitializeResult().Instructions; !strings.Contains(in, "as agent "+agent+":") {
			t.Errorf("%s is served as: %q", agent, in)
		}
		sessions[agent] = cs
	}
	done := filepath.Join(ws, "by-alice")
	r, err := sessions["alice"].CallTool(ctx, &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"path": "by-alice", "content": "alice"}})
	if err != nil || r.IsError {
		t.Fatalf("alice's call: %+v %v\n%s", r, err, out)
	}
	if _, err := os.Stat(done); err != nil {
		t.Fatalf("alice's call did not run: %v", err)
	}
	// Bob's token does not reach alice's session.
	code, _, body := rawPost(t, url, `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`,
		"Authorization: Bearer "+token("bob"), "Mcp-Session-Id: "+sessions["alice"].ID(), "Mcp-Protocol-Version: 2025-06-18")
	if code == http.StatusOK {
		t.Errorf("bob used alice's session: %d %.200s", code, body)
	}

	// No token, no face: the worker refuses to start; and the insecure
	// mode takes loopback only.
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no token", worker("--mcp-tokens", t.TempDir()), "no MCP token"},
		{"insecure off loopback", append(worker("--mcp-insecure-loopback"), "--mcp-listen", "0.0.0.0:0"), "not a loopback address"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "worker"), tc.args...)
		cmd.Env = append(os.Environ(), env...)
		o, err := cmd.CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(o), tc.want) {
			t.Errorf("%s: exit %v, want a refusal saying %q:\n%s", tc.name, err, tc.want, o)
		}
	}
}

// TestHookServeAsksWhoIsThere: another local user without the agent's
// token gets 401 from toolctl hook serve and parks nothing; with the
// token, the same request parks a call for people to decide.
func TestHookServeAsksWhoIsThere(t *testing.T) {
	bin := buildBinaries(t, "toolctl")
	s := startApprovalStack(t)
	tokens, err := bearer.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := bearer.Mint(tokens, "claude-code")
	if err != nil {
		t.Fatal(err)
	}
	_, out, url := startBinary(t, nil, `PreToolUse endpoint on (http://\S+/hook)`, filepath.Join(bin, "toolctl"),
		"--nats", s.worker.url, "hook", "serve", "--agent", "claude-code", "--listen", "127.0.0.1:0", "--ask-timeout", "1m")
	payload := string(hookPayload(t.TempDir(), "git push origin main"))
	pending := func() int {
		var list []approver.View
		s.api(t, "GET", "/api/approvals", "", &list)
		return len(list)
	}
	for name, header := range map[string][]string{
		"no token":      nil,
		"a made-up one": {"Authorization: Bearer tg1.claude-code.bm90LWEtcmVhbC10b2tlbi1hdC1hbGwtbm90LW9uZQ"},
	} {
		code, h, body := rawPost(t, url, payload, header...)
		if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer ") {
			t.Errorf("%s: %d %q %.200s, want 401 with a Bearer challenge", name, code, h.Get("WWW-Authenticate"), body)
		}
	}
	// A parked call would be in the approver by now: the authorised
	// request below is, after the same path.
	if n := pending(); n != 0 || strings.Contains(out.String(), "waiting for a person") {
		t.Fatalf("unauthenticated requests parked %d call(s):\n%s", n, out)
	}
	answered := make(chan int, 1)
	go func() {
		code, _, _ := rawPost(t, url, payload, "Authorization: Bearer "+tok)
		answered <- code
	}()
	var list []approver.View
	eventually(t, "the authorised ask in the approver", func() (bool, string) {
		list = nil
		s.api(t, "GET", "/api/approvals", "", &list)
		return len(list) == 1, "nothing pending"
	})
	if list[0].Agent != "claude-code" {
		t.Errorf("parked as %q", list[0].Agent)
	}
	var res approver.Result
	if code := s.api(t, "POST", "/api/approvals/"+list[0].CallID+"/reject", `{"reason":"test"}`, &res); code != http.StatusOK {
		t.Fatalf("reject = %d", code)
	}
	if code := testenv.Recv(t, answered, "the hook's answer"); code != http.StatusOK {
		t.Fatalf("the authorised hook request: %d", code)
	}
}

// eventuallyOut waits until a process's output contains s.
func eventuallyOut(t *testing.T, out *syncBuffer, s string) {
	t.Helper()
	eventually(t, s, func() (bool, string) { return strings.Contains(out.String(), s), out.String() })
}

// openPTY opens a pseudo-terminal pair: what a person's shell gives a
// command as its standard output.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		testenv.Missing(t, "no /dev/ptmx to make a terminal: "+err.Error())
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// TestSecretsAreWrittenForTheirOwnerOnly runs toolctl as a person would,
// under the usual umask 022: credentials and tokens land in files only
// their owner reads (by default in the state directory, the path
// printed), several at once with --out-dir, on standard output only when
// asked with --out -, and never onto a terminal.
func TestSecretsAreWrittenForTheirOwnerOnly(t *testing.T) {
	bin := filepath.Join(buildBinaries(t, "toolctl"), "toolctl")
	state := stateTempDir(t)
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	run := func(stdout *os.File, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), identity.EnvStateDir+"="+state)
		var o, e syncBuffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if stdout != nil {
			cmd.Stdout = stdout
		}
		err := cmd.Run()
		return o.String(), e.String(), exitCode(err)
	}
	mode := func(path string, want os.FileMode) {
		t.Helper()
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, st.Mode().Perm(), want)
		}
	}
	creds := func(path, name string) {
		t.Helper()
		mode(path, 0o600)
		c, err := identity.LoadCreds(path)
		if err != nil || c.Role != identity.RoleAgent || c.Name != name {
			t.Errorf("%s: %v %v", path, c, err)
		}
	}

	// The default: a file of the state directory, its path printed.
	o, e, code := run(nil, "creds", "agent", "alice")
	path := strings.TrimSpace(o)
	if code != 0 || !identity.Within(path, state) {
		t.Fatalf("creds agent alice: exit %d, stdout %q, stderr %s", code, o, e)
	}
	creds(path, "alice")
	mode(filepath.Dir(path), 0o700)

	// --out onto a file another user could read: replaced, now 0600.
	wide := filepath.Join(t.TempDir(), "bob.creds")
	writeFile(t, wide, "old\n")
	if err := os.Chmod(wide, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, e, code := run(nil, "creds", "agent", "bob", "--out", wide); code != 0 {
		t.Fatalf("--out: %d %s", code, e)
	}
	creds(wide, "bob")

	// Many in one process.
	dir := filepath.Join(t.TempDir(), "fleet")
	if _, e, code := run(nil, "creds", "agent", "a1", "a2", "a3", "--out-dir", dir); code != 0 {
		t.Fatalf("--out-dir: %d %s", code, e)
	}
	mode(dir, 0o700)
	for _, n := range []string{"a1", "a2", "a3"} {
		creds(filepath.Join(dir, n+".creds"), n)
	}
	if _, _, code := run(nil, "creds", "agent", "a1", "a2"); code != 2 {
		t.Errorf("several names without --out-dir: exit %d, want 2", code)
	}

	// --out - prints to a pipe, and refuses a terminal.
	if o, _, code := run(nil, "creds", "agent", "carol", "--out", "-"); code != 0 || !strings.Contains(o, "BEGIN NATS USER JWT") {
		t.Errorf("--out - to a pipe: exit %d: %.80q", code, o)
	}
	master, tty := openPTY(t)
	_, e, code = run(tty, "creds", "agent", "carol", "--out", "-")
	if code != 2 || !strings.Contains(e, "terminal") {
		t.Errorf("--out - to a terminal: exit %d, want 2 and a reason: %s", code, e)
	}
	// toolctl has exited: whatever it wrote to the terminal is readable.
	pfd := []unix.PollFd{{Fd: int32(master.Fd()), Events: unix.POLLIN}}
	if n, _ := unix.Poll(pfd, 200); n > 0 {
		buf := make([]byte, 4096)
		n, _ := unix.Read(int(master.Fd()), buf)
		t.Errorf("the terminal got %q", buf[:max(n, 0)])
	}
	if _, e, code := run(tty, "creds", "token", "carol", "--out", "-"); code != 2 {
		t.Errorf("token --out - to a terminal: exit %d: %s", code, e)
	}

	// Tokens: the secret 0600 where printed, only its hash kept.
	o, e, code = run(nil, "creds", "token", "alice")
	if code != 0 {
		t.Fatalf("creds token: %d %s", code, e)
	}
	tokFile := strings.TrimSpace(o)
	mode(tokFile, 0o600)
	mode(filepath.Join(state, "tokens"), 0o700)
	mode(filepath.Join(state, "tokens", "alice.sha256"), 0o600)
	tok, _ := os.ReadFile(tokFile)
	if a, err := bearer.Agent(filepath.Join(state, "tokens"), strings.TrimSpace(string(tok))); err != nil || a != "alice" {
		t.Errorf("the token authenticates %q, %v", a, err)
	}
	if h, _ := os.ReadFile(filepath.Join(state, "tokens", "alice.sha256")); strings.Contains(string(h), strings.TrimSpace(string(tok))) {
		t.Error("the token is kept in clear")
	}

	// nats-config: by default into the state directory, secrets 0600.
	if _, e, code := run(nil, "nats-config"); code != 0 {
		t.Fatalf("nats-config: %d %s", code, e)
	}
	mode(filepath.Join(state, "nats"), 0o700)
	for _, f := range []string{"worker.creds", "approver.creds", "admin.creds"} {
		mode(filepath.Join(state, "nats", f), 0o600)
	}
}
