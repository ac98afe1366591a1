// Package client is the Go client agents use to call tools through
// toolgate: it publishes a call as a CloudEvent and waits for its result.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolgate/toolgate/pkg/events"
)

// ErrNoResult is returned by Result when no result is stored for the call.
var ErrNoResult = errors.New("no result stored for this call")

// resultsStream is the stream results are retained in (see internal/bus).
const resultsStream = "TOOLGATE_RESULTS"

// storedResultCheck is how often a waiting call also looks for its stored
// result, in case the live one was missed.
const storedResultCheck = 5 * time.Second

// Client calls tools as one agent.
type Client struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	agent string
	mode  events.Mode
}

// Option configures a Client.
type Option func(*Client)

// WithMode sets the CloudEvents content mode calls are published in;
// default binary. Results come back in the same mode.
func WithMode(m events.Mode) Option { return func(c *Client) { c.mode = m } }

// New returns a client publishing as agent over nc.
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
	return c, nil
}

// Agent is the client's agent id.
func (c *Client) Agent() string { return c.agent }

// CallOption configures one call.
type CallOption func(*callOpts)

type callOpts struct {
	id          string
	session     string
	timeout     time.Duration
	onPending   func(events.ResultData)
	onProgress  func(events.ProgressData)
	traceParent string
}

// WithID sets the call id (default: a fresh unique id). Publishing the same
// id again never runs the tool twice.
func WithID(id string) CallOption { return func(o *callOpts) { o.id = id } }

// WithSession sets the session id.
func WithSession(s string) CallOption { return func(o *callOpts) { o.session = s } }

// WithTimeout asks for a shorter tool timeout than the tool's default.
func WithTimeout(d time.Duration) CallOption { return func(o *callOpts) { o.timeout = d } }

// OnPending is called when the call is parked for approval; Call keeps
// waiting for the final result.
func OnPending(fn func(events.ResultData)) CallOption { return func(o *callOpts) { o.onPending = fn } }

// OnProgress receives output chunks streamed while the tool runs.
func OnProgress(fn func(events.ProgressData)) CallOption {
	return func(o *callOpts) { o.onProgress = fn }
}

// Call runs tool with args and waits for the final result or ctx. It
// subscribes to the result subject before publishing, so a fast result is
// never missed. args may be a Go value, json.RawMessage or []byte.
func (c *Client) Call(ctx context.Context, tool string, args any, opts ...CallOption) (*events.ResultData, error) {
	o := c.options(opts)
	// Results and progress share one channel, so that every progress
	// chunk is handed over before the result that follows it.
	ch := make(chan *nats.Msg, 4096)
	sub, err := c.nc.ChanSubscribe(events.ResultSubject(c.agent, o.id), ch)
	if err != nil {
		return nil, fmt.Errorf("subscribe to result: %w", err)
	}
	defer sub.Unsubscribe()
	if o.onProgress != nil {
		ps, err := c.nc.ChanSubscribe(events.ProgressSubject(c.agent, o.id), ch)
		if err != nil {
			return nil, fmt.Errorf("subscribe to progress: %w", err)
		}
		defer ps.Unsubscribe()
	}
	if err := c.publish(ctx, tool, args, o); err != nil {
		return nil, err
	}
	return c.wait(ctx, ch, o)
}

// Submit publishes a call and returns its id without waiting. Use Wait or
// Result to collect the outcome later.
func (c *Client) Submit(ctx context.Context, tool string, args any, opts ...CallOption) (string, error) {
	o := c.options(opts)
	return o.id, c.publish(ctx, tool, args, o)
}

// Wait waits for the final result of a call submitted earlier, including
// one that arrived while nobody was listening.
func (c *Client) Wait(ctx context.Context, id string, opts ...CallOption) (*events.ResultData, error) {
	o := c.options(append(opts, WithID(id)))
	ch := make(chan *nats.Msg, 64)
	sub, err := c.nc.ChanSubscribe(events.ResultSubject(c.agent, id), ch)
	if err != nil {
		return nil, fmt.Errorf("subscribe to result: %w", err)
	}
	defer sub.Unsubscribe()
	if r, err := c.Result(ctx, id); err == nil && r.Status.Final() {
		return r, nil
	}
	return c.wait(ctx, ch, o)
}

// Result fetches the latest stored result of a call (possibly pending), or
// ErrNoResult.
func (c *Client) Result(ctx context.Context, id string) (*events.ResultData, error) {
	s, err := c.js.Stream(ctx, resultsStream)
	if err != nil {
		return nil, fmt.Errorf("results stream: %w", err)
	}
	raw, err := s.GetLastMsgForSubject(ctx, events.ResultSubject(c.agent, id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, ErrNoResult
	}
	if err != nil {
		return nil, fmt.Errorf("get result %s: %w", id, err)
	}
	var r events.ResultData
	if _, err := events.DecodeData(raw.Header, raw.Data, &r); err != nil {
		return nil, fmt.Errorf("decode result %s: %w", id, err)
	}
	return &r, nil
}

// Tools asks a worker for the registry listing.
func (c *Client) Tools(ctx context.Context) ([]events.ToolData, error) {
	m, err := c.nc.RequestWithContext(ctx, events.SubjectToolsList, nil)
	if err != nil {
		return nil, fmt.Errorf("list tools (is a worker running?): %w", err)
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
		o.id = nuid.Next()
	}
	return o
}

func (c *Client) publish(ctx context.Context, tool string, args any, o *callOpts) error {
	if err := events.ValidToken(o.id); err != nil {
		return fmt.Errorf("call id: %w", err)
	}
	if err := events.ValidToken(tool); err != nil {
		return fmt.Errorf("tool name: %w", err)
	}
	raw, err := marshalArgs(args)
	if err != nil {
		return err
	}
	ev, err := events.NewCall(o.id, c.agent, events.CallData{Arguments: raw, SessionID: o.session, TimeoutMS: o.timeout.Milliseconds()})
	if err != nil {
		return err
	}
	if o.traceParent != "" {
		ev.SetExtension("traceparent", o.traceParent)
	}
	m, err := events.Encode(events.CallSubject(c.agent, tool), ev, c.mode)
	if err != nil {
		return err
	}
	if _, err := c.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publish call %s: %w", o.id, err)
	}
	return nil
}

func (c *Client) wait(ctx context.Context, ch <-chan *nats.Msg, o *callOpts) (*events.ResultData, error) {
	progress := events.ProgressSubject(c.agent, o.id)
	// A live message can be missed (a reconnect during a long call, a
	// slow consumer); the stored result cannot, so look now and then.
	t := time.NewTicker(storedResultCheck)
	defer t.Stop()
	for {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-t.C:
			if r, err := c.Result(ctx, o.id); err == nil && r.Status.Final() {
				return r, nil
			}
			continue
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for result of %s: %w", o.id, ctx.Err())
		}
		if m.Subject == progress {
			var p events.ProgressData
			if _, err := events.DecodeData(m.Header, m.Data, &p); err == nil && o.onProgress != nil {
				o.onProgress(p)
			}
			continue
		}
		var r events.ResultData
		if _, err := events.DecodeData(m.Header, m.Data, &r); err != nil {
			return nil, fmt.Errorf("decode result of %s: %w", o.id, err)
		}
		if r.Status.Final() {
			return &r, nil
		}
		if o.onPending != nil {
			o.onPending(r)
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
