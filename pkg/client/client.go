// Package client is the Go client agents use to call tools through
// toolgate: it publishes a call as a CloudEvent and waits for its result.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/eventsig"
	"github.com/toolgate/toolgate/pkg/trust"
)

// ErrNoResult is returned by Result when no result is stored for the call.
var ErrNoResult = errors.New("no result stored for this call")

// ErrListingRefused reports a worker refusing a tool listing: the tools
// of another agent are listed only to that agent or an admin.
var ErrListingRefused = errors.New("tool listing refused")

// storedResultCheck is how often a waiting call checks whether it may
// have missed its live result, and when it first looks for its stored
// result (lookupSchedule).
const storedResultCheck = 5 * time.Second

// Client calls tools as one agent.
type Client struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	agent   string
	mode    events.Mode
	trusted []string
	optErr  error
	verify  *eventsig.Verifier
	refused atomic.Int64
	results resultMux // the waiting calls' subscription to their results
}

// Option configures a Client.
type Option func(*Client)

// WithMode sets the CloudEvents content mode calls are published in;
// default binary. Results come back in the same mode.
func WithMode(m events.Mode) Option { return func(c *Client) { c.mode = m } }

// New returns a client publishing as agent over nc. A client is safe for
// concurrent calls; make one per connection and agent, not one per call:
// each keeps its own subscription to the agent's results while its calls
// wait, and for a while after.
func New(nc *nats.Conn, agent string, opts ...Option) (*Client, error) {
	if err := events.ValidToken(agent); err != nil {
		return nil, fmt.Errorf("agent id: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	c := &Client{nc: nc, js: js, agent: agent}
	for _, o := range opts {
		o(c)
	}
	if c.optErr != nil {
		return nil, c.optErr
	}
	if err := c.newVerifier(); err != nil {
		return nil, fmt.Errorf("trusted accounts: %w", err)
	}
	return c, nil
}

// Credentials reads an agent's .creds file (`toolctl creds agent NAME`;
// empty file: $TOOLGATE_CREDS) and returns the agent's name and the
// nats.Connect options that authenticate as it and use its inbox prefix
// _INBOX_<agent>, the only inbox its credentials let it read:
//
//	agent, opts, err := client.Credentials("agent-7.creds")
//	nc, err := nats.Connect(url, opts...)
//	c, err := client.New(nc, agent, client.WithCredsTrust("agent-7.creds"))
//
// WithCredsTrust makes the client accept the results of the workers of
// the account that issued the credentials (results are signed).
func Credentials(file string) (agent string, opts []nats.Option, err error) {
	if file == "" {
		file = os.Getenv(trust.EnvCreds)
	}
	if file == "" {
		return "", nil, fmt.Errorf("no credentials: give an agent's .creds file or set %s", trust.EnvCreds)
	}
	cr, err := trust.LoadCreds(file)
	if err != nil {
		return "", nil, err
	}
	if cr.Role != trust.RoleAgent {
		return "", nil, fmt.Errorf("%w: %s are for %s %q, an agent needs agent credentials", trust.ErrBadCreds, file, cr.Role, cr.Name)
	}
	return cr.Name, cr.NATSOptions(), nil
}

// Agent is the client's agent id.
func (c *Client) Agent() string { return c.agent }

// CallOption configures one call.
type CallOption func(*callOpts)

type callOpts struct {
	id         string
	session    string
	timeout    time.Duration
	judgeOnly  bool
	parent     string
	onPending  func(events.ResultData)
	onProgress func(events.ProgressData)

	// cancelOnDone: the call was published by Call, which cancels it
	// when its ctx is cancelled.
	cancelOnDone bool

	// W3C trace context sent with the call (WithTraceContext).
	traceparent, tracestate string
}

// WithTraceContext sends W3C trace context with the call (the CloudEvents
// distributed-tracing extension): the worker's spans continue that trace,
// and the result and audit carry it on. A traceparent that is not a valid
// W3C value is ignored, with its tracestate.
func WithTraceContext(traceparent, tracestate string) CallOption {
	return func(o *callOpts) {
		if traceParentRE().MatchString(traceparent) && traceparent != "00-00000000000000000000000000000000-0000000000000000-00" {
			o.traceparent, o.tracestate = traceparent, tracestate
		}
	}
}

// WithID sets the call id (default: NewCallID, 128 random bits). Publishing the same
// id again never runs the tool twice.
func WithID(id string) CallOption { return func(o *callOpts) { o.id = id } }

// WithSession sets the session id.
func WithSession(s string) CallOption { return func(o *callOpts) { o.session = s } }

// WithTimeout asks for a shorter tool timeout than the tool's default.
func WithTimeout(d time.Duration) CallOption { return func(o *callOpts) { o.timeout = d } }

// JudgeOnly asks for a verdict only: the call is judged (and, on ask,
// approved by people) as usual, and an allowed or approved call is
// answered ok without running the tool.
func JudgeOnly() CallOption { return func(o *callOpts) { o.judgeOnly = true } }

// WithParent names the task a call serves (its parent call id). Calls
// made under a TaskHandler's context, or with Task.Call, get it (and the
// task's session) without asking.
func WithParent(taskID string) CallOption { return func(o *callOpts) { o.parent = taskID } }

// OnPending is called when the call is parked for approval; Call keeps
// waiting for the final result.
func OnPending(fn func(events.ResultData)) CallOption { return func(o *callOpts) { o.onPending = fn } }

// OnProgress receives the progress of the call while the tool runs
// (partial output, status notes; bounded by the workers in rate and size),
// in order, from the goroutine of Call or Wait, every chunk before the
// result. Progress is best effort: the result is authoritative.
func OnProgress(fn func(events.ProgressData)) CallOption {
	return func(o *callOpts) { o.onProgress = fn }
}

// Call runs tool with args and waits for the final result or ctx. It
// subscribes to the result subject before publishing, so a fast result is
// never missed. args may be a Go value, json.RawMessage or []byte.
// Cancelling ctx cancels the call: the cancellation is published, the
// call is stopped wherever it is (queued, parked, running), and Call
// returns ctx's error. A ctx whose deadline passes only stops the waiting.
func (c *Client) Call(ctx context.Context, tool string, args any, opts ...CallOption) (res *events.ResultData, err error) {
	o := c.options(opts)
	if t := c.fromTask(ctx, o); t != nil {
		defer func() { t.called(res) }()
	}
	rs, err := c.subscribe(o)
	if err != nil {
		return nil, err
	}
	defer rs.unsubscribe()
	if err := c.publish(ctx, tool, args, o); err != nil {
		return nil, err
	}
	o.cancelOnDone = true
	return c.wait(ctx, rs, o)
}

// Cancel cancels the call id of this agent wherever it is and returns
// where it was: queued (the worker that takes it answers it cancelled
// without running it), parked (the approval request is withdrawn), running
// (its worker stops it; a command's process tree is killed) or finished
// (nothing is done; Status says how it ended). The cancelled result
// follows on the call's result subject (Wait). An agent cancels only its
// own calls.
func (c *Client) Cancel(ctx context.Context, id string) (*events.CancelReply, error) {
	if err := events.ValidToken(id); err != nil {
		return nil, fmt.Errorf("call id: %w", err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
	}
	m, err := c.nc.RequestWithContext(ctx, events.CancelSubject(c.agent, id), nil)
	if err != nil {
		return nil, fmt.Errorf("cancel %s (is a worker running?): %w", id, err)
	}
	var r events.CancelReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return nil, fmt.Errorf("decode the answer to cancel %s: %w", id, err)
	}
	if r.Error != "" {
		return &r, fmt.Errorf("cancel %s: %s", id, r.Error)
	}
	return &r, nil
}

// Submit publishes a call and returns its id without waiting. Use Wait or
// Result to collect the outcome later.
func (c *Client) Submit(ctx context.Context, tool string, args any, opts ...CallOption) (string, error) {
	o := c.options(opts)
	c.fromTask(ctx, o)
	return o.id, c.publish(ctx, tool, args, o)
}

// Wait waits for the final result of a call submitted earlier, including
// one that arrived while nobody was listening; with OnProgress, it hands
// over the progress published from then on.
func (c *Client) Wait(ctx context.Context, id string, opts ...CallOption) (*events.ResultData, error) {
	o := c.options(append(opts, WithID(id)))
	rs, err := c.subscribe(o)
	if err != nil {
		return nil, err
	}
	defer rs.unsubscribe()
	if r, err := c.Result(ctx, id); err == nil && r.Status.Final() {
		return r, nil
	}
	return c.wait(ctx, rs, o)
}

// Result fetches the latest stored result of a call (possibly pending), or
// ErrNoResult. A worker answers it (toolgate.api.result.<agent>.<call
// id>): agents have no JetStream API, and ask only for their own results.
func (c *Client) Result(ctx context.Context, id string) (*events.ResultData, error) {
	if err := events.ValidToken(id); err != nil {
		return nil, fmt.Errorf("call id: %w", err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	raw, err := c.nc.RequestWithContext(ctx, events.ResultAPISubject(c.agent, id), nil)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("get result %s (is a worker running?): %w", id, err)
	}
	if err != nil {
		return nil, fmt.Errorf("get result %s: %w", id, err)
	}
	if st := raw.Header.Get(events.APIStatusHeader); st != "" {
		if strings.HasPrefix(st, "404") {
			return nil, ErrNoResult
		}
		return nil, fmt.Errorf("get result %s: status %s", id, st)
	}
	r := c.result(raw.Header, raw.Data, id)
	if r == nil {
		return nil, fmt.Errorf("%w: the stored one of %s does not verify", ErrNoResult, id)
	}
	return r, nil
}

// Tools asks a worker for the registry listing.
func (c *Client) Tools(ctx context.Context) ([]events.ToolData, error) {
	return c.listTools(ctx, events.SubjectToolsList, nil)
}

// listTools sends a tools listing request on subject with body (nil for
// the whole registry) and decodes the answer.
func (c *Client) listTools(ctx context.Context, subject string, body []byte) ([]events.ToolData, error) {
	m, err := c.nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		return nil, fmt.Errorf("list tools (is a worker running?): %w", err)
	}
	if e := m.Header.Get(micro.ErrorHeader); e != "" {
		return nil, fmt.Errorf("%w: %s", ErrListingRefused, e)
	}
	var out []events.ToolData
	if err := json.Unmarshal(m.Data, &out); err != nil {
		return nil, fmt.Errorf("decode tool listing: %w", err)
	}
	return out, nil
}

func (c *Client) options(opts []CallOption) *callOpts {
	o := &callOpts{}
	for _, f := range opts {
		f(o)
	}
	if o.id == "" {
		o.id = NewCallID()
	}
	return o
}

// The buffers of a call's subscription: its results alone (a pending
// result and the final one, a duplicate), or its results and progress
// messages. A buffer is allocated and zeroed for every call.
const (
	resultBuffer   = 64
	progressBuffer = 4096
)

// subscribe listens for the result of call o.id and, with OnProgress, its
// progress. Results and progress share one channel, so that every
// progress chunk is handed over before the result that follows it.
func (c *Client) subscribe(o *callOpts) (*resultSub, error) {
	size := resultBuffer
	if o.onProgress != nil {
		size = progressBuffer
	}
	rs := &resultSub{ch: make(chan *nats.Msg, size), mux: &c.results}
	stop, err := c.results.wait(c.nc, c.agent, o.id, rs.ch)
	if err != nil {
		return nil, err
	}
	rs.stop = stop
	if o.onProgress == nil {
		return rs, nil
	}
	ps, err := c.nc.ChanSubscribe(events.ProgressSubject(c.agent, o.id), rs.ch)
	if err != nil {
		rs.unsubscribe()
		return nil, fmt.Errorf("subscribe to progress: %w", err)
	}
	rs.progress = ps
	return rs, nil
}

// resultSub is what a waiting call receives into ch: its result (from
// the client's resultMux) and, when asked for, its progress.
type resultSub struct {
	ch       chan *nats.Msg
	mux      *resultMux
	stop     func()             // stops receiving the result
	progress *nats.Subscription // nil when no progress is asked for
}

func (rs *resultSub) unsubscribe() {
	rs.stop()
	if rs.progress != nil {
		_ = rs.progress.Unsubscribe()
	}
}

// dropped is how many messages the call may have missed: results the
// client's subscription lost, progress the call's dropped (ch full).
func (rs *resultSub) dropped() int {
	n := rs.mux.dropped()
	if rs.progress != nil {
		if d, err := rs.progress.Dropped(); err == nil {
			n += d
		}
	}
	return n
}

// fromTask gives a call made under a task handler's context the task's
// id as parent call id and the task's session, unless the call names its
// own; it returns the task.
func (c *Client) fromTask(ctx context.Context, o *callOpts) *Task {
	t, ok := TaskFrom(ctx)
	if !ok || t.c.agent != c.agent {
		return nil
	}
	if o.parent == "" {
		o.parent = t.TaskID
	}
	if o.session == "" {
		o.session = t.SessionID
	}
	return t
}

func (c *Client) publish(ctx context.Context, tool string, args any, o *callOpts) error {
	if err := events.ValidToken(o.id); err != nil {
		return fmt.Errorf("call id: %w", err)
	}
	if err := events.ValidToken(tool); err != nil {
		return fmt.Errorf("tool name: %w", err)
	}
	if o.parent != "" {
		if err := events.ValidToken(o.parent); err != nil {
			return fmt.Errorf("parent call id: %w", err)
		}
	}
	raw, err := marshalArgs(args)
	if err != nil {
		return err
	}
	m, err := c.callMsg(tool, events.CallData{Arguments: raw, SessionID: o.session, TimeoutMS: o.timeout.Milliseconds(), JudgeOnly: o.judgeOnly,
		ParentCallID: o.parent}, o)
	if err != nil {
		return err
	}
	return publishOnce(ctx, o.id, func(ctx context.Context) error {
		_, err := c.js.PublishMsg(ctx, m)
		return err
	})
}

// callMsg is the message of a call event of tool with data, in the
// client's mode: events.EncodeData's (which builds what NewCall and
// Encode build, without an event.Event for a plain binary call), or
// through NewCall and Encode for a call carrying a tracestate, an
// extension EncodeData has no field for.
func (c *Client) callMsg(tool string, data events.CallData, o *callOpts) (*nats.Msg, error) {
	subject := events.CallSubject(c.agent, tool)
	if o.tracestate == "" {
		return events.EncodeData(subject, events.Attrs{ID: o.id, Source: events.AgentSource(c.agent), Type: events.TypeCallRequested,
			TraceParent: o.traceparent}, data, c.mode)
	}
	ev, err := events.NewCall(o.id, c.agent, data)
	if err != nil {
		return nil, err
	}
	if o.traceparent != "" {
		ev.SetExtension("traceparent", o.traceparent)
		ev.SetExtension("tracestate", o.tracestate)
	}
	return events.Encode(subject, ev, c.mode)
}

// publishAttempt bounds how long one publish of a call waits for the
// calls stream's acknowledgement, and publishRetryFor how long it is
// published again after the first attempt. An acknowledgement can be lost
// when the stream's leader stored the call and died before answering (or
// the answer was lost with a route): waiting for it until the caller's
// deadline left the agent without the result its call already had. A
// publish again carries the same Nats-Msg-Id, so the stream stores the
// call once and acknowledges the duplicate; publishRetryFor stays well
// inside the stream's duplicate window (2 minutes). A publish nothing
// answered (no stream leader in an election, or no worker running the
// intake that stores an agent's calls: every worker restarting) is asked
// again, publishPause apart, for noStreamRetryFor: long enough for an
// election or a rolling restart, short enough that an agent with no
// worker at all hears so soon.
const (
	publishAttempt   = 5 * time.Second
	publishRetryFor  = 90 * time.Second
	noStreamRetryFor = 30 * time.Second
	publishPause     = 250 * time.Millisecond
)

// publishOnce runs publish, each attempt bounded by publishAttempt, until
// one is acknowledged, ctx is done, publishRetryFor has passed, or
// noStreamRetryFor has and nothing answered the last attempt.
func publishOnce(ctx context.Context, id string, publish func(context.Context) error) error {
	start := time.Now()
	for {
		actx, cancel := context.WithTimeout(ctx, publishAttempt)
		err := publish(actx)
		cancel()
		if err == nil {
			return nil
		}
		lost := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
		unanswered := errors.Is(err, jetstream.ErrNoStreamResponse) && time.Since(start) < noStreamRetryFor
		if ctx.Err() != nil || time.Since(start) > publishRetryFor || !(lost || unanswered) {
			return fmt.Errorf("publish call %s: %w", id, err)
		}
		if unanswered {
			time.Sleep(publishPause)
		}
	}
}

func (c *Client) wait(ctx context.Context, rs *resultSub, o *callOpts) (*events.ResultData, error) {
	progress := events.ProgressSubject(c.agent, o.id)
	// A live message can be missed (a reconnect during a long call, a
	// slow consumer); the stored result cannot, so look now and then
	// (lookupSchedule says when).
	t := time.NewTicker(storedResultCheck)
	defer t.Stop()
	sched := newLookupSchedule(time.Now(), c.nc.Stats().Reconnects)
	// A look-up runs beside the wait, one at a time, each bounded on its
	// own: a worker that took the request and stopped (crashed, frozen,
	// cut off) holds neither the live result nor the call's deadline.
	lctx, cancelLookups := context.WithCancel(ctx)
	defer cancelLookups()
	var lookup chan *events.ResultData // nil: none running
	for {
		var m *nats.Msg
		select {
		case m = <-rs.ch:
		case now := <-t.C:
			if lookup == nil && sched.due(now, c.nc.Stats().Reconnects, rs.dropped()) {
				lookup = make(chan *events.ResultData, 1)
				go func(found chan<- *events.ResultData) {
					ctx, cancel := context.WithTimeout(lctx, storedResultCheck)
					defer cancel()
					r, err := c.Result(ctx, o.id)
					if err != nil || !r.Status.Final() {
						r = nil
					}
					found <- r
				}(lookup)
			}
			continue
		case r := <-lookup:
			lookup = nil
			if r != nil {
				return r, nil
			}
			continue
		case <-ctx.Done():
			if o.cancelOnDone && errors.Is(ctx.Err(), context.Canceled) {
				// Fire and forget: the workers stop the call; its
				// cancelled result is stored as every result is.
				if c.nc.Publish(events.CancelSubject(c.agent, o.id), nil) == nil {
					_ = c.nc.FlushTimeout(2 * time.Second)
				}
			}
			return nil, fmt.Errorf("waiting for result of %s: %w", o.id, ctx.Err())
		}
		if m.Subject == progress {
			var p events.ProgressData
			if ev, err := events.DecodeData(m.Header, m.Data, &p); err == nil && o.onProgress != nil &&
				ev.Type() == events.TypeCallProgress && p.CallID == o.id {
				o.onProgress(p)
			}
			continue
		}
		r := c.result(m.Header, m.Data, o.id)
		if r == nil {
			// Refused: not this call's result, unsigned or forged (inside
			// the agents account another agent can make an answer land
			// here, a reply subject it names). The real one is still to come.
			continue
		}
		if r.Status.Final() {
			return r, nil
		}
		if o.onPending != nil {
			o.onPending(*r)
		}
	}
}

func marshalArgs(args any) (json.RawMessage, error) {
	switch a := args.(type) {
	case nil:
		return json.RawMessage("{}"), nil
	case json.RawMessage:
		return a, nil
	case []byte:
		return json.RawMessage(a), nil
	default:
		b, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("marshal arguments: %w", err)
		}
		return b, nil
	}
}
