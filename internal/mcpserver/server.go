// Package mcpserver is toolgate's face as an MCP server: the fleet's tools,
// as one agent may call them, offered to any MCP client (Claude Code,
// Cursor, Codex, the SDKs) over stdio or Streamable HTTP.
//
// tools/list is the workers' registry listing for the agent, without the
// tools its policy denies outright, kept fresh by the registry and policy
// events on the bus. tools/call is a bus call through pkg/client, so the
// policy gate, approvals and audit apply as to any other call: a denied
// call is a result with isError and the reason, an asked call waits for
// the people's decision, sending progress notifications that say where to
// decide it.
package mcpserver

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tooldef"
	"github.com/toolgate/toolgate/pkg/toolformat"
)

// Defaults for the zero values of Options.
const (
	DefaultCallWait    = 15 * time.Minute
	DefaultRefresh     = 30 * time.Second
	DefaultApproverURL = "http://127.0.0.1:8470"
	// DefaultPendingAfter is how long the request of a parked call that
	// asked for no progress waits for people before it is answered
	// pending: well within the request timeouts of MCP clients (the
	// TypeScript SDK's 60 s, the Python SDK's 30 s of HTTP).
	DefaultPendingAfter = 20 * time.Second
	// heartbeat is how often a parked call reminds the client it waits.
	heartbeat = 10 * time.Second
)

// Options configure a Server.
type Options struct {
	// NC is the connection the registry and policy events arrive on.
	NC *nats.Conn
	// Client calls tools as the agent this face serves. Required.
	Client *client.Client
	// ApproverURL is where people decide parked calls, named in the
	// messages of a parked call; default DefaultApproverURL.
	ApproverURL string
	// CallWait bounds how long one tools/call waits for its result,
	// approvals included; default DefaultCallWait.
	CallWait time.Duration
	// PendingAfter is how long a tools/call whose call parked waits for
	// people's decision before it is answered, not an error, with
	// _meta["toolgate/status"] = "pending", the call id and how to collect
	// the result (StatusTool), when the client sent no progress token:
	// such a client cannot be kept waiting by notifications, and would
	// time the request out. Default DefaultPendingAfter. A client that
	// sent a progress token waits up to CallWait, told every 10 s.
	PendingAfter time.Duration
	// Refresh is how often the tool list is fetched again even without
	// events; default DefaultRefresh.
	Refresh time.Duration
	// Version is the server version reported to clients.
	Version string
	// Logger receives logs; default slog.Default().
	Logger *slog.Logger
}

// Server is an MCP server whose tools are the fleet's.
type Server struct {
	o   Options
	mcp *mcp.Server

	mu    sync.Mutex
	known map[string]string // tool name → its definition as listed, to see changes
	ready chan struct{}     // closed after the first successful refresh
	once  sync.Once
}

// New returns a Server for o; Sync fills and maintains its tool list.
func New(o Options) (*Server, error) {
	if o.Client == nil {
		return nil, errors.New("mcpserver: no client")
	}
	if o.ApproverURL == "" {
		o.ApproverURL = DefaultApproverURL
	}
	if o.CallWait <= 0 {
		o.CallWait = DefaultCallWait
	}
	if o.Refresh <= 0 {
		o.Refresh = DefaultRefresh
	}
	if o.PendingAfter <= 0 {
		o.PendingAfter = DefaultPendingAfter
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	s := &Server{o: o, known: map[string]string{}, ready: make(chan struct{})}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "toolgate", Title: "toolgate", Version: o.Version}, &mcp.ServerOptions{
		Instructions: "Tools run by toolgate workers as agent " + o.Client.Agent() +
			": every call passes the policy gate; some wait for a person's approval.",
		Logger: o.Logger,
		Capabilities: &mcp.ServerCapabilities{
			Tools:   &mcp.ToolCapabilities{ListChanged: true},
			Logging: &mcp.LoggingCapabilities{},
		},
	})
	s.mcp.AddTool(&mcp.Tool{Name: StatusTool, InputSchema: statusSchema,
		Description: "The result of a call whose request ended while it waited for a person's approval (call_id from its messages), or that it still waits.",
		Annotations: annotations(tooldef.KindRead)}, s.status)
	return s, nil
}

// MCP is the underlying SDK server, to run on a transport.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Ready is closed once the tool list has been fetched.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Sync fetches the tool list and keeps it current until ctx is done: on
// every registry or policy event, and every Options.Refresh. Clients are
// told when the list changes (notifications/tools/list_changed).
func (s *Server) Sync(ctx context.Context) error {
	kick := make(chan struct{}, 1)
	poke := func(*nats.Msg) {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	if s.o.NC != nil {
		for _, subj := range []string{events.ToolEventSubject("*"), events.PolicyChangeSubject} {
			sub, err := s.o.NC.Subscribe(subj, poke)
			if err != nil {
				return fmt.Errorf("subscribe %s: %w", subj, err)
			}
			defer sub.Unsubscribe()
		}
	}
	t := time.NewTicker(s.o.Refresh)
	defer t.Stop()
	retry := time.NewTimer(0)
	defer retry.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-t.C:
		case <-retry.C:
		}
		err := s.refresh(ctx)
		switch {
		case err == nil:
			failures = 0
		case ctx.Err() == nil:
			// No worker answers yet (at start, the worker itself is
			// still starting): try again soon; say so when it lasts.
			failures++
			level := slog.LevelDebug
			if failures%10 == 0 {
				level = slog.LevelWarn
			}
			s.o.Logger.Log(ctx, level, "mcp: list tools", "err", err, "attempts", failures)
			retry.Reset(time.Second)
		}
	}
}

// refresh lists the agent's tools and adds, replaces or removes the
// server's tools to match.
func (s *Server) refresh(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := s.o.Client.AgentTools(lctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for _, t := range list {
		if seen[t.Name] {
			continue
		}
		schema, err := toolformat.ObjectSchema(t.Parameters)
		if err != nil {
			s.o.Logger.Warn("mcp: tool not offered", "tool", t.Name, "err", err)
			continue
		}
		if t.Name == StatusTool {
			continue // the server's own
		}
		seen[t.Name] = true
		def := t.Description + "\x00" + t.Kind + "\x00" + string(schema)
		if s.known[t.Name] == def {
			continue
		}
		s.known[t.Name] = def
		s.mcp.AddTool(&mcp.Tool{Name: t.Name, Description: t.Description, InputSchema: schema,
			Annotations: annotations(t.Kind)}, s.call)
	}
	var gone []string
	for name := range s.known {
		if !seen[name] {
			gone = append(gone, name)
			delete(s.known, name)
		}
	}
	if len(gone) > 0 {
		s.mcp.RemoveTools(gone...)
	}
	s.once.Do(func() { close(s.ready) })
	return nil
}

// annotations are the MCP hints for a tool of kind: read and search tools
// are read-only, execute and write tools may destroy, network tools reach
// the open world. They are hints to the client; the policy gate decides.
func annotations(kind string) *mcp.ToolAnnotations {
	yes, no := true, false
	switch kind {
	case tooldef.KindRead, tooldef.KindSearch:
		return &mcp.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &no, OpenWorldHint: &no}
	case tooldef.KindWrite:
		return &mcp.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &no}
	case tooldef.KindNetwork:
		return &mcp.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &yes}
	default:
		return &mcp.ToolAnnotations{DestructiveHint: &yes}
	}
}

// call runs one tools/call as a bus call and maps its result.
func (s *Server) call(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	args := req.Params.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	var p *progress
	if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
		p = &progress{session: req.Session, token: tok}
	}
	// The bus call has a context of its own. A client whose request timed
	// out (the TypeScript SDK's 60 s, unless progress resets it) cancels
	// its request; a request cancelled before its call parks cancels it,
	// but a parked call stays parked for the person deciding it, its result
	// collected later with StatusTool. After CallWait the call's context
	// ends, which leaves the call parked too (a deadline never cancels a
	// call on the bus).
	wctx, cancelCall := context.WithTimeout(context.WithoutCancel(ctx), s.o.CallWait)
	var parked parkState
	var hbOnce sync.Once
	// A client that asked for no progress hears of a parked call when
	// PendingAfter passes: it is answered pending.
	pendingAfter := make(chan events.ResultData, 1)
	opts := []client.CallOption{
		client.OnPending(func(r events.ResultData) {
			parked.set()
			if p == nil {
				time.AfterFunc(s.o.PendingAfter, func() {
					select {
					case pendingAfter <- r:
					default:
					}
				})
			}
			msg := s.parkedMessage(r)
			s.o.Logger.Info("mcp: call parked", "call_id", r.CallID, "tool", r.Tool, "agent", r.Agent)
			p.send(ctx, msg)
			// Progress keeps clients that reset their timeout on it
			// waiting, for as long as the request lasts.
			hbOnce.Do(func() { go p.remind(ctx, msg) })
		}),
		client.OnProgress(func(pd events.ProgressData) { p.send(ctx, pd.Chunk) }),
	}
	// An MCP client tracing its requests puts the W3C traceparent in
	// _meta; the call continues that trace (invalid values are dropped).
	if tp, ok := req.Params.Meta["traceparent"].(string); ok {
		opts = append(opts, client.WithTraceContext(tp, ""))
	}
	type outcome struct {
		res *events.ResultData
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		defer cancelCall()
		res, err := s.o.Client.Call(wctx, req.Params.Name, args, opts...)
		done <- outcome{res, err}
	}()
	var o outcome
	select {
	case o = <-done:
	case r := <-pendingAfter:
		// The call stays parked; the answer says how to collect it.
		s.o.Logger.Info("mcp: answered pending; the call stays parked", "call_id", r.CallID, "tool", r.Tool)
		return s.pendingResult(r, ""), nil
	case <-ctx.Done():
		if parked.get() {
			// The call stays parked; StatusTool collects it.
			s.o.Logger.Info("mcp: request ended while the call waits; the call stays parked", "tool", req.Params.Name, "err", context.Cause(ctx))
			return nil, ctx.Err()
		}
		cancelCall() // not parked: cancelling the request cancels the call
		<-done
		return nil, ctx.Err()
	}
	if o.err != nil {
		if errors.Is(o.err, context.DeadlineExceeded) && ctx.Err() == nil {
			return errorResult(fmt.Sprintf("timed out: no result within %s (the call may still finish; %s collects it, `toolctl events` shows it)", s.o.CallWait, StatusTool)), nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return errorResult("toolgate could not run the call: " + o.err.Error()), nil
	}
	return result(o.res), nil
}

// parkState says whether a call has parked.
type parkState struct {
	mu     sync.Mutex
	parked bool
}

func (p *parkState) set() { p.mu.Lock(); p.parked = true; p.mu.Unlock() }
func (p *parkState) get() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.parked
}

// StatusTool is the tool that collects a call whose request ended while
// it was parked: its result once final, else that it still waits.
const StatusTool = "toolgate_call_status"

// statusSchema is StatusTool's input.
var statusSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"call_id":{"type":"string","description":"the call id a parked call's messages and _meta name"},` +
	`"wait_seconds":{"type":"integer","minimum":0,"maximum":50,"description":"how long to wait for the result before answering that the call still waits (default 0)"}},` +
	`"required":["call_id"],"additionalProperties":false}`)

// status answers StatusTool: the stored result of one of this agent's
// calls, waiting up to wait_seconds for a final one.
func (s *Server) status(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		CallID      string `json:"call_id"`
		WaitSeconds int    `json:"wait_seconds"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || in.CallID == "" {
		return errorResult(StatusTool + ": want {\"call_id\": \"...\"}"), nil
	}
	if err := events.ValidToken(in.CallID); err != nil {
		return errorResult(StatusTool + ": call_id: " + err.Error()), nil
	}
	wait := time.Duration(min(max(in.WaitSeconds, 0), 50)) * time.Second
	r, err := s.o.Client.Result(ctx, in.CallID)
	if (err != nil || !r.Status.Final()) && wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, wait)
		if w, werr := s.o.Client.Wait(wctx, in.CallID); werr == nil {
			r, err = w, nil
		}
		cancel()
	}
	switch {
	case err == nil && r.Status.Final():
		return result(r), nil
	case err == nil:
		return s.pendingResult(*r, "; ask again later"), nil
	case errors.Is(err, client.ErrNoResult):
		return errorResult(fmt.Sprintf("no result of call %s yet: it is still queued or running, or it is not a call of agent %s", in.CallID, s.o.Client.Agent())), nil
	default:
		return errorResult("toolgate could not read the call's result: " + err.Error()), nil
	}
}

// pendingResult answers a call that waits for people: not an error, its
// id and status (pending) in _meta, and how to collect its result.
func (s *Server) pendingResult(r events.ResultData, suffix string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s.parkedMessage(r) + suffix}},
		Meta: mcp.Meta{"toolgate/call_id": r.CallID, "toolgate/status": string(cmp.Or(r.Status, events.StatusPending))}}
}

func (s *Server) parkedMessage(r events.ResultData) string {
	msg := fmt.Sprintf("call %s waits for a person's approval", r.CallID)
	if r.Decision != nil && r.Decision.Reason != "" {
		msg += " (" + r.Decision.Reason + ")"
	}
	return msg + fmt.Sprintf(": approve or reject it at %s or with `toolctl approvals approve %s`; if this request ends first, the call stays parked and %s {\"call_id\": %q} collects its result",
		s.o.ApproverURL, r.CallID, StatusTool, r.CallID)
}

// result maps a final toolgate result to an MCP tool result: the output
// as text, isError for anything but a successful run, and the call id,
// status and decision in _meta.
func result(r *events.ResultData) *mcp.CallToolResult {
	text := r.Output
	switch r.Status {
	case events.StatusOK:
	case events.StatusDenied:
		reason := r.Output
		if r.Decision != nil && r.Decision.Reason != "" {
			reason = r.Decision.Reason
			if r.Decision.Rule != "" {
				reason += " (rule " + r.Decision.Rule + ")"
			}
		}
		text = "denied by policy: " + reason
	case events.StatusTimeout:
		text = "timed out: the tool ran past its timeout and was stopped. " + r.Output
	default:
		text = string(r.Status) + ": " + r.Output
	}
	out := &mcp.CallToolResult{
		Content: []mcp.Content{&mcp.TextContent{Text: text}},
		IsError: r.IsError || r.Status != events.StatusOK,
	}
	meta := mcp.Meta{"toolgate/call_id": r.CallID, "toolgate/status": string(r.Status)}
	if r.Decision != nil {
		meta["toolgate/decision"] = r.Decision
	}
	out.Meta = meta
	return out
}

func errorResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: true}
}

// progress sends notifications/progress for one call when the client
// asked for them (a progress token); a nil *progress sends nothing.
type progress struct {
	session *mcp.ServerSession
	token   any
	mu      sync.Mutex
	n       float64
}

func (p *progress) send(ctx context.Context, msg string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.n++
	n := p.n
	p.mu.Unlock()
	_ = p.session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: n, Message: msg})
}

// remind repeats msg while the call stays parked, so clients that drop
// silent requests keep waiting.
func (p *progress) remind(ctx context.Context, msg string) {
	if p == nil {
		return
	}
	t := time.NewTicker(heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.send(ctx, "still "+msg)
		}
	}
}
