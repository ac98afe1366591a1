package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/pkg/events"
)

// Remote is a hook served over NATS request/reply: the worker sends an
// events.HookRequest to Subject and takes the events.HookResponse. No
// responder, no answer in time, an error reply or an answer that is not
// a verdict is a failure of the hook.
type Remote struct {
	// Name is the hook's name, sent in every request.
	Name string
	// Subject is where the hook service listens (by convention
	// events.HookSubject(Name)).
	Subject string
	// Conn is the worker's connection.
	Conn *nats.Conn
}

var (
	_ BeforeHook = (*Remote)(nil)
	_ AfterHook  = (*Remote)(nil)
)

// Before asks the service about a call before it is judged.
func (r *Remote) Before(ctx context.Context, c *Call) (Verdict, error) {
	resp, err := r.ask(ctx, request(events.HookBefore, r.Name, c))
	if err != nil {
		return Verdict{}, err
	}
	return Verdict{Action: Action(resp.Action), Arguments: resp.Arguments, Reason: resp.Reason}, nil
}

// After asks the service about a call's output.
func (r *Remote) After(ctx context.Context, c *Call, out Output) (string, error) {
	req := request(events.HookAfter, r.Name, c)
	req.Output, req.IsError = out.Content, out.IsError
	resp, err := r.ask(ctx, req)
	if err != nil {
		return "", err
	}
	switch resp.Action {
	case events.HookPass:
		return out.Content, nil
	case events.HookModify:
		if resp.Output == nil {
			return "", fmt.Errorf("%w: %s answered modify without an output", ErrHook, r.Name)
		}
		return *resp.Output, nil
	}
	return "", fmt.Errorf("%w: %s answered %q to an output; only pass or modify", ErrHook, r.Name, resp.Action)
}

func request(stage, name string, c *Call) events.HookRequest {
	return events.HookRequest{Stage: stage, Hook: name, CallID: c.ID, Agent: c.Agent, SessionID: c.SessionID,
		Tool: c.Tool, Arguments: c.Arguments, Approved: c.Approved}
}

func (r *Remote) ask(ctx context.Context, req events.HookRequest) (*events.HookResponse, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: encode request: %v", ErrHook, r.Name, err)
	}
	if max := r.Conn.MaxPayload(); max > 0 && int64(len(b)) > max {
		return nil, fmt.Errorf("%w: %s: the request (%d bytes) is larger than the server allows (%d)", ErrHook, r.Name, len(b), max)
	}
	msg, err := r.Conn.RequestWithContext(ctx, r.Subject, b)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("%w: %s: nothing answers on %s", ErrHook, r.Name, r.Subject)
	case err != nil:
		return nil, fmt.Errorf("%w: %s: %v", ErrHook, r.Name, err)
	}
	if len(msg.Data) == 0 && msg.Header.Get("Status") != "" {
		return nil, fmt.Errorf("%w: %s: the server answered status %s", ErrHook, r.Name, msg.Header.Get("Status"))
	}
	var resp events.HookResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("%w: %s: the answer is not a hook response: %v", ErrHook, r.Name, err)
	}
	if resp.Action == events.HookError {
		return nil, fmt.Errorf("%w: %s answered an error: %s", ErrHook, r.Name, resp.Reason)
	}
	return &resp, nil
}

// Handler answers hook requests in a Go hook service (Serve).
type Handler interface {
	Hook(ctx context.Context, req *events.HookRequest) (*events.HookResponse, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req *events.HookRequest) (*events.HookResponse, error)

// Hook calls f.
func (f HandlerFunc) Hook(ctx context.Context, req *events.HookRequest) (*events.HookResponse, error) {
	return f(ctx, req)
}

// Serve answers hook requests on subject with h, in a queue group named
// after the subject so that several replicas share the load, until the
// subscription is drained. A handler error is answered with the action
// "error", which the worker counts as a failure of the hook (the call
// fails closed unless the hook is fail_open). Any language can do the
// same: answer the JSON of events.HookResponse.
func Serve(nc *nats.Conn, subject string, h Handler) (*nats.Subscription, error) {
	return nc.QueueSubscribe(subject, subject, func(m *nats.Msg) {
		var req events.HookRequest
		resp := &events.HookResponse{Action: events.HookError}
		if err := json.Unmarshal(m.Data, &req); err != nil {
			resp.Reason = "the request is not a hook request: " + err.Error()
		} else if r, err := h.Hook(context.Background(), &req); err != nil {
			resp.Reason = err.Error()
		} else if r != nil {
			resp = r
		}
		b, err := json.Marshal(resp)
		if err != nil {
			b = []byte(`{"action":"error","reason":"the response could not be encoded"}`)
		}
		_ = m.Respond(b)
	})
}
