package test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bearer"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/mcpserver"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/remote"
)

// mcpPolicy hides glob from everyone, asks before writes and denies
// reading key files.
const mcpPolicy = `tools:
  default: allow
  write_file:
    action: ask
deny: [glob]
constraints:
  denied_paths: ["**/*.pem"]
`

// mcpStack is a worker (with the MCP HTTP face when http is set) under
// mcpPolicy, and an approver on the same bus.
type mcpStack struct {
	worker   *process
	approver string // approver base URL
	mcpURL   string // the worker's MCP endpoint, when served
	token    string // agent mcp-http's bearer token for it
	shown    string // the approver URL parked calls name
}

// httpApprover is the approver URL the HTTP face is told to name.
const httpApprover = "https://approve.example.test"

func startMCPStack(t *testing.T, http bool) *mcpStack {
	t.Helper()
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "hello from the workspace\n")
	writeFile(t, filepath.Join(ws, "server.pem"), "-----BEGIN PRIVATE KEY----- secret\n")
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, mcpPolicy)
	s := &mcpStack{}
	mcpReady := make(chan string, 1)
	s.worker = startProcess(t, ws, func(o *daemon.Options) {
		o.PolicyFile = pol
		o.RemoteInterval = 200 * time.Millisecond
		if http {
			o.MCPListen = "127.0.0.1:0"
			o.MCPTokens = t.TempDir()
			tok, err := bearer.Mint(o.MCPTokens, "mcp-http")
			if err != nil {
				t.Fatal(err)
			}
			s.token = tok
			o.MCPReady = func(u string) { mcpReady <- u }
			o.MCPApprover = httpApprover
		}
	})
	if http {
		s.mcpURL = testenv.Recv(t, mcpReady, "mcpReady")
	}
	s.approver = startApprover(t, s.worker.url, nil)
	s.shown = s.approver
	if http {
		s.shown = httpApprover
	}
	return s
}

func (s *mcpStack) approve(t *testing.T, id string) {
	t.Helper()
	st := &approvalStack{worker: s.worker, url: s.approver}
	var res approver.Result
	if code := st.api(t, "POST", "/api/approvals/"+id+"/approve", `{"comment":"ok from the MCP test"}`, &res); code != 200 || res.Status != "approved" {
		t.Fatalf("approve %s = %d %+v", id, code, res)
	}
}

// parkedNotes collects the progress messages of calls, and hands over the
// first call id a message names as waiting for approval.
type parkedNotes struct {
	mu   sync.Mutex
	msgs []string
	ids  chan string
}

var parkedRE = regexp.MustCompile(`call (\S+) waits for a person's approval`)

func newParked() *parkedNotes { return &parkedNotes{ids: make(chan string, 16)} }

func (p *parkedNotes) handler(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	msg := req.Params.Message
	p.mu.Lock()
	p.msgs = append(p.msgs, msg)
	first := len(p.msgs) == 1
	p.mu.Unlock()
	if m := parkedRE.FindStringSubmatch(msg); m != nil && first {
		p.ids <- m[1]
	}
}

func (p *parkedNotes) messages() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.msgs)
}

func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// exerciseMCP drives one MCP session through what an agent does: list
// the tools, read a file, be denied a key file, and write a file a
// person approves while the call waits.
func exerciseMCP(t *testing.T, s *mcpStack, cs *mcp.ClientSession, p *parkedNotes) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*mcp.Tool{}
	for _, tl := range lt.Tools {
		byName[tl.Name] = tl
	}
	for _, want := range []string{"read", "write", "edit", "ls", "grep", "bash"} {
		if byName[want] == nil {
			t.Errorf("tools/list lacks %s; has %v", want, keys(byName))
		}
	}
	if byName["glob"] != nil {
		t.Error("tools/list offers glob, which the policy denies outright")
	}
	if rd := byName["read"]; rd != nil {
		schema, _ := json.Marshal(rd.InputSchema)
		if !strings.Contains(string(schema), `"path"`) || rd.Annotations == nil || !rd.Annotations.ReadOnlyHint {
			t.Errorf("read: schema %s, annotations %+v", schema, rd.Annotations)
		}
	}

	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read", Arguments: map[string]any{"path": "README.md"},
		Meta: mcp.Meta{"traceparent": tp}})
	if err != nil {
		t.Fatal(err)
	}
	if r.IsError || !strings.Contains(text(r), "hello from the workspace") {
		t.Fatalf("read README.md = error %v %q", r.IsError, text(r))
	}
	if got := resultTraceParent(t, s.worker.url, r); got != tp {
		t.Errorf("the call's result carries traceparent %q, want the MCP request's %q", got, tp)
	}

	r, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "read", Arguments: map[string]any{"path": "server.pem"}})
	if err != nil {
		t.Fatal(err)
	}
	if !r.IsError || !strings.Contains(text(r), "denied by policy") || strings.Contains(text(r), "secret") {
		t.Fatalf("read server.pem = error %v %q, want a denial without the key", r.IsError, text(r))
	}

	// A tool the policy hides is not callable either.
	if r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "glob", Arguments: map[string]any{"pattern": "*"}}); err == nil && !r.IsError {
		t.Fatalf("glob ran: %q", text(r))
	}

	type outcome struct {
		r   *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		params := &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"path": "approved.txt", "content": "written after approval\n"}}
		params.SetProgressToken("write-1")
		r, err := cs.CallTool(ctx, params)
		done <- outcome{r, err}
	}()
	var id string
	select {
	case id = <-p.ids:
	case o := <-done:
		t.Fatalf("write finished without waiting for approval: %+v %v", o.r, o.err)
	case <-ctx.Done():
		t.Fatal("no progress notification said the write waits for approval")
	}
	if _, err := os.Stat(filepath.Join(s.worker.ws, "approved.txt")); err == nil {
		t.Fatal("the file was written before anyone approved")
	}
	msg := p.messages()[0]
	if !strings.Contains(msg, s.shown) || !strings.Contains(msg, "toolctl approvals approve "+id) {
		t.Errorf("parked message %q does not say where to approve", msg)
	}
	s.approve(t, id)
	o := testenv.Recv(t, done, "done")
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.r.IsError || o.r.Meta["toolgate/call_id"] != id {
		t.Fatalf("approved write = error %v %q meta %v", o.r.IsError, text(o.r), o.r.Meta)
	}
	b, err := os.ReadFile(filepath.Join(s.worker.ws, "approved.txt"))
	if err != nil || string(b) != "written after approval\n" {
		t.Fatalf("file after approval: %q %v", b, err)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestMCPOverStdio runs the built toolctl binary as an MCP client runs it
// from an mcpServers entry, and drives it with the Go SDK's client.
func TestMCPOverStdio(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "toolctl")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/toolctl").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	s := startMCPStack(t, false)
	p := newParked()
	c := mcp.NewClient(&mcp.Implementation{Name: "stdio-test", Version: "1"}, &mcp.ClientOptions{ProgressNotificationHandler: p.handler})
	cmd := exec.Command(bin, "--nats", s.worker.url, "mcp", "--agent", "claude", "--approver", s.approver)
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.InitializeResult().ServerInfo.Name; got != "toolgate" {
		t.Errorf("server name %q", got)
	}
	exerciseMCP(t, s, cs, p)
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
		t.Errorf("toolctl mcp exit: %v", cmd.ProcessState)
	}
}

// TestMCPOverHTTP drives the worker's Streamable HTTP face with the Go
// SDK's client, and checks the DNS rebinding protection with raw requests.
func TestMCPOverHTTP(t *testing.T) {
	s := startMCPStack(t, true)
	p := newParked()
	changed := make(chan struct{}, 16)
	c := mcp.NewClient(&mcp.Implementation{Name: "http-test", Version: "1"}, &mcp.ClientOptions{ProgressNotificationHandler: p.handler,
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} }})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.mcpURL,
		HTTPClient: &http.Client{Transport: bearerTransport{s.token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	exerciseMCP(t, s, cs, p)

	// A tool that joins the fleet (here a remote one) reaches the client
	// as a list change.
	nc := dialAs(t, s.worker.url, identity.RoleTool, "stamp")
	svc, err := remote.Serve(nc, remote.Tool{Name: "stamp", Description: "Stamp a text."},
		func(context.Context, *remote.Request) (*remote.Result, error) {
			return &remote.Result{Content: "stamped"}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	for found := false; !found; {
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("no tools/list_changed after a tool joined")
		}
		lt, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range lt.Tools {
			found = found || tl.Name == "stamp"
		}
	}
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "stamp", Arguments: map[string]any{}})
	if err != nil || r.IsError || text(r) != "stamped" {
		t.Fatalf("stamp over MCP = %+v, %v", r, err)
	}

	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	port := s.mcpURL[strings.LastIndex(s.mcpURL, ":")+1 : strings.LastIndex(s.mcpURL, "/")]
	tests := []struct {
		name, host, origin string
		want               int
		noToken            bool
	}{
		{"rebound host", "evil.example.com", "", http.StatusForbidden, false},
		{"rebound host and origin", "evil.example.com:" + port, "http://evil.example.com", http.StatusForbidden, false},
		{"loopback host, foreign origin", "localhost:" + port, "http://evil.example.com", http.StatusForbidden, false},
		{"localhost", "localhost:" + port, "http://localhost:" + port, http.StatusOK, false},
		{"127.0.0.1", "127.0.0.1:" + port, "", http.StatusOK, false},
		{"127.0.0.1 without a token", "127.0.0.1:" + port, "", http.StatusUnauthorized, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", s.mcpURL, strings.NewReader(init))
			req.Host = tt.host
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if !tt.noToken {
				req.Header.Set("Authorization", "Bearer "+s.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
		})
	}
}

// resultTraceParent returns the traceparent of the stored result of the
// call an MCP result names.
func resultTraceParent(t *testing.T, natsURL string, r *mcp.CallToolResult) string {
	t.Helper()
	id, _ := r.Meta["toolgate/call_id"].(string)
	nc := dialAs(t, natsURL, identity.RoleAdmin, "admin")
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, bus.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	// The agent token is the one the face calls as; find the call by id.
	m, err := st.GetLastMsgForSubject(ctx, "toolgate.result.*."+id)
	if err != nil {
		t.Fatalf("result of %s: %v", id, err)
	}
	ev, _, err := events.Decode(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	tp, _ := ev.Extensions()["traceparent"].(string)
	return tp
}

// TestMCPCallTimeoutSaysSo waits for a parked call no one decides, on a
// face with a short wait: the result says it timed out, and the call
// stays parked for people.
// inMemoryMCP serves the fleet's tools as agent over an in-memory
// transport, with o's other options, until ctx ends, and connects a
// client with copts.
func inMemoryMCP(ctx context.Context, t *testing.T, s *mcpStack, agent string, o mcpserver.Options, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	nc := dialAs(t, s.worker.url, identity.RoleAgent, agent)
	c, err := client.New(nc, agent)
	if err != nil {
		t.Fatal(err)
	}
	o.NC, o.Client = nc, c
	srv, err := mcpserver.New(o)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Sync(ctx) }()
	testenv.Recv(t, srv.Ready(), "srv.Ready()")
	st, ct := mcp.NewInMemoryTransports()
	go func() { _ = srv.MCP().Run(ctx, st) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, copts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestMCPCallTimeoutSaysSo(t *testing.T) {
	s := startMCPStack(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := inMemoryMCP(ctx, t, s, "impatient", mcpserver.Options{CallWait: 2 * time.Second}, nil)
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"path": "later.txt", "content": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if !r.IsError || !strings.HasPrefix(text(r), "timed out") {
		t.Fatalf("result = error %v %q, want a timeout", r.IsError, text(r))
	}
	var list []approver.View
	(&approvalStack{worker: s.worker, url: s.approver}).api(t, "GET", "/api/approvals", "", &list)
	if len(list) != 1 || list[0].Agent != "impatient" {
		t.Fatalf("pending approvals %+v, want the parked write", list)
	}
	if _, err := os.Stat(filepath.Join(s.worker.ws, "later.txt")); err == nil {
		t.Fatal("the parked write ran")
	}
}

// TestMCPParkedCallSurvivesClientTimeout: a client whose request for a
// parked call times out cancels the request (as the TypeScript SDK does
// after 60 s); the call stays parked, a person approves it, it runs,
// and toolgate_call_status collects its result. A call cancelled before
// it parks is still cancelled.
func TestMCPParkedCallSurvivesClientTimeout(t *testing.T) {
	s := startMCPStack(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := newParked()
	cs := inMemoryMCP(ctx, t, s, "hasty", mcpserver.Options{ApproverURL: s.approver},
		&mcp.ClientOptions{ProgressNotificationHandler: p.handler})

	rctx, timeout := context.WithCancel(ctx) // the client's request timeout
	errc := make(chan error, 1)
	go func() {
		params := &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"path": "late.txt", "content": "approved late\n"}}
		params.SetProgressToken("w")
		_, err := cs.CallTool(rctx, params)
		errc <- err
	}()
	var id string
	select {
	case id = <-p.ids:
	case err := <-errc:
		t.Fatalf("the write finished without parking: %v", err)
	case <-ctx.Done():
		t.Fatal("no progress said the write waits")
	}
	if msg := p.messages()[0]; !strings.Contains(msg, mcpserver.StatusTool) {
		t.Errorf("the parked message %q does not say how to collect the call", msg)
	}
	timeout()
	if err := testenv.Recv(t, errc, "the timed-out request's end"); err == nil {
		t.Fatal("the timed-out request returned a result")
	}
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.StatusTool, Arguments: map[string]any{"call_id": id}})
	if err != nil {
		t.Fatalf("%s: %v", mcpserver.StatusTool, err)
	}
	if r.IsError || r.Meta["toolgate/status"] != string(events.StatusPending) {
		t.Fatalf("status of the parked call: %v %+v %q", err, r, text(r))
	}
	s.approve(t, id) // fails when the call was withdrawn
	r, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.StatusTool, Arguments: map[string]any{"call_id": id, "wait_seconds": 50}})
	if err != nil {
		t.Fatalf("%s: %v", mcpserver.StatusTool, err)
	}
	if r.IsError || r.Meta["toolgate/call_id"] != id || r.Meta["toolgate/status"] != string(events.StatusOK) {
		t.Fatalf("status after approval: %v %+v %q", err, r, text(r))
	}
	if b, err := os.ReadFile(filepath.Join(s.worker.ws, "late.txt")); err != nil || string(b) != "approved late\n" {
		t.Fatalf("the approved write: %q %v", b, err)
	}
	r, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.StatusTool, Arguments: map[string]any{"call_id": "no-such-call"}})
	if err != nil {
		t.Fatalf("%s: %v", mcpserver.StatusTool, err)
	}
	if !r.IsError || !strings.Contains(text(r), "no result") {
		t.Fatalf("status of an unknown call: %v %q", err, text(r))
	}
}

// TestMCPCancelBeforeParkingCancelsTheCall: a request cancelled while
// its call runs (not parked) still cancels the call: the command is
// killed before it prints its last line.
func TestMCPCancelBeforeParkingCancelsTheCall(t *testing.T) {
	s := startMCPStack(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	started := make(chan struct{}, 1)
	cs := inMemoryMCP(ctx, t, s, "quitter", mcpserver.Options{}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			if strings.Contains(req.Params.Message, "started") {
				select {
				case started <- struct{}{}:
				default:
				}
			}
		}})
	results, err := dialAs(t, s.worker.url, identity.RoleAdmin, "admin").SubscribeSync(events.ResultSubject("quitter", "*"))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		params := &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "echo started; sleep 30; echo finished"}}
		params.SetProgressToken("b")
		_, err := cs.CallTool(rctx, params)
		errc <- err
	}()
	select {
	case <-started:
	case err := <-errc:
		t.Fatalf("bash ended before it was cancelled: %v", err)
	case <-ctx.Done():
		t.Fatal("no progress from the running command")
	}
	stop()
	testenv.Recv(t, errc, "the cancelled request's end")
	// The worker answers cancelled once it has killed the command, long
	// before its sleep would end.
	for {
		m, err := results.NextMsg(60 * time.Second)
		if err != nil {
			t.Fatalf("no result of the cancelled call: %v", err)
		}
		var r events.ResultData
		if _, err := events.DecodeData(m.Header, m.Data, &r); err != nil {
			t.Fatal(err)
		}
		if r.Status == events.StatusCancelled && !strings.Contains(r.Output, "finished") {
			return
		}
		if r.Status.Final() {
			t.Fatalf("the call ended %s, want cancelled: %q", r.Status, r.Output)
		}
	}
}

// TestMCPRefusesAForgedResult: a model calling through the MCP face is
// not answered by an unsigned result planted on its parked call's result
// subject; approved, the call runs and its real result is the answer.
func TestMCPRefusesAForgedResult(t *testing.T) {
	s := startMCPStack(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := inMemoryMCP(ctx, t, s, "mcpvictim", mcpserver.Options{}, nil)
	answer := make(chan *mcp.CallToolResult, 1)
	go func() {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"path": "mcp.txt", "content": "real"}})
		if err != nil {
			t.Error(err)
		}
		answer <- r
	}()
	var list []approver.View
	until(t, 30*time.Second, func() bool {
		list = nil
		return (&approvalStack{worker: s.worker, url: s.approver}).api(t, "GET", "/api/approvals", "", &list) == 200 && len(list) == 1
	})
	id := list[0].CallID
	js, err := jetstream.New(dialAs(t, s.worker.url, identity.RoleWorker, "w"))
	if err != nil {
		t.Fatal(err)
	}
	forged, err := events.EncodeData(events.ResultSubject("mcpvictim", id), events.Attrs{ID: "forged-mcp", Source: "toolgate://worker/w",
		Type: events.TypeCallCompleted, Subject: id},
		events.ResultData{CallID: id, Agent: "mcpvictim", Tool: "write", Status: events.StatusOK, Output: "forged"}, events.Binary)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, forged); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-answer:
		t.Fatalf("the MCP face answered with a forged result: %q", text(r))
	case <-time.After(2 * time.Second):
	}
	s.approve(t, id)
	r := testenv.Recv(t, answer, "the MCP face's answer")
	if r == nil || r.IsError || strings.Contains(text(r), "forged") {
		t.Fatalf("answer after approval: %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(s.worker.ws, "mcp.txt")); err != nil || string(b) != "real" {
		t.Fatalf("the approved write: %q %v", b, err)
	}
}
