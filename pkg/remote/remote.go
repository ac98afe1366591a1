// Package remote serves a toolgate tool from any process as a NATS micro
// service, and holds the contract workers discover such tools by.
//
// A remote tool is a micro service endpoint whose metadata names the tool:
//
//	toolgate.tool         the tool name (required)
//	toolgate.description  what it does, for a model
//	toolgate.schema       the JSON Schema of its arguments (a JSON object)
//	toolgate.kind         its kind for policies; workers use execute when absent
//
// Workers find endpoints through the micro discovery API ($SRV.INFO),
// then confirm each announced definition on the tool's own subject: a
// request to toolgate.remote.<name> with the header Toolgate-Describe set
// and no body is answered with the endpoint metadata as a JSON object
// (the same four keys). Only a service holding the credentials of tool
// <name> can hear that subject, so an announcement another service makes
// for the name, with a definition of its own, is refused (the worker
// publishes ToolRefused). Workers then register the tools (announced as
// ToolRegistered), and route each call
// by request/reply to the endpoint's subject within the call's timeout.
// The request body is the validated arguments object; the headers
// Toolgate-Call-Id, Toolgate-Agent and Toolgate-Session say who calls.
// The reply is a Result as JSON, or a micro service error
// (Nats-Service-Error), which the agent sees as a failed tool. Any language
// with a micro implementation can serve a tool; this package does it in Go
// in a few lines:
//
//	svc, err := remote.Serve(nc, remote.Tool{Name: "weather", Description: "...", Schema: schema},
//		func(ctx context.Context, r *remote.Request) (*remote.Result, error) {
//			return &remote.Result{Content: "sunny"}, nil
//		})
package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Endpoint metadata keys and request headers of the contract.
const (
	MetaTool        = "toolgate.tool"
	MetaDescription = "toolgate.description"
	MetaSchema      = "toolgate.schema"
	MetaKind        = "toolgate.kind"

	HeaderCallID  = "Toolgate-Call-Id"
	HeaderAgent   = "Toolgate-Agent"
	HeaderSession = "Toolgate-Session"
	// HeaderDeadline is the call's deadline (RFC 3339, nanoseconds) by
	// which the worker stops waiting for the reply.
	HeaderDeadline = "Toolgate-Deadline"
	// HeaderDescribe marks a worker's request for the tool's definition,
	// answered with its endpoint metadata as a JSON object instead of a
	// call.
	HeaderDescribe = "Toolgate-Describe"
)

// SubjectPrefix starts the subject a tool is served on by Serve:
// toolgate.remote.<name>.
const SubjectPrefix = "toolgate.remote."

// Tool describes a tool served remotely.
type Tool struct {
	// Name is the tool's name in the registry: letters, digits, '_' and
	// '-', at most 64 bytes, not starting with mcp__.
	Name string
	// Description tells a model what the tool does.
	Description string
	// Schema is the JSON Schema of the arguments object; empty means
	// {"type":"object"}.
	Schema json.RawMessage
	// Kind is the tool's kind for policies (read, write, execute, search,
	// network, other); empty means execute.
	Kind string
	// Version is the service version (SemVer); default 0.1.0.
	Version string
}

// Request is one call of a remote tool.
type Request struct {
	CallID    string
	Agent     string
	SessionID string
	// Arguments is the arguments object, already validated against the
	// tool's schema by the worker.
	Arguments json.RawMessage
}

// Result is a remote tool's reply.
type Result struct {
	// Content is the text given back to the model.
	Content string `json:"content"`
	// IsError marks a failure of the tool itself.
	IsError bool `json:"is_error,omitempty"`
	// Metadata holds structured extras.
	Metadata map[string]any `json:"metadata,omitempty"`
}

// HandlerFunc runs a call. An error is returned to the agent as a failed
// tool with the error's text.
type HandlerFunc func(ctx context.Context, r *Request) (*Result, error)

// ErrInvalidTool reports a Tool that cannot be served.
var ErrInvalidTool = errors.New("invalid remote tool")

// nameRE is what a tool name may be, compiled on first use: its counted
// repetition makes a large program.
var nameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`) })

// Check reports what is wrong with t, if anything.
func (t Tool) Check() error {
	if !nameRE().MatchString(t.Name) || strings.HasPrefix(t.Name, "-") {
		return fmt.Errorf("%w: name %q: 1 to 64 letters, digits, '_' or '-'", ErrInvalidTool, t.Name)
	}
	if strings.HasPrefix(t.Name, "mcp__") {
		return fmt.Errorf("%w: name %q: mcp__ is reserved for MCP servers' tools", ErrInvalidTool, t.Name)
	}
	if len(t.Schema) > 0 {
		var s struct {
			Type any `json:"type"`
		}
		if err := json.Unmarshal(t.Schema, &s); err != nil || s.Type != "object" {
			return fmt.Errorf("%w: %s: the schema must be a JSON object schema with \"type\": \"object\"", ErrInvalidTool, t.Name)
		}
	}
	return nil
}

// Metadata is the endpoint metadata announcing t.
func (t Tool) Metadata() map[string]string {
	m := map[string]string{MetaTool: t.Name, MetaDescription: t.Description}
	if len(t.Schema) > 0 {
		m[MetaSchema] = string(t.Schema)
	}
	if t.Kind != "" {
		m[MetaKind] = t.Kind
	}
	return m
}

// Serve serves t on nc as the micro service toolgate-<name>, endpoint
// <name> on toolgate.remote.<name>, until the returned service is stopped
// or nc closes. Run it in as many processes as you like: calls are spread
// over them (one queue group).
func Serve(nc *nats.Conn, t Tool, h HandlerFunc) (micro.Service, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("%w: %s has no handler", ErrInvalidTool, t.Name)
	}
	version := t.Version
	if version == "" {
		version = "0.1.0"
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name: "toolgate-" + t.Name, Version: version, Description: t.Description,
	})
	if err != nil {
		return nil, fmt.Errorf("serve %s: %w", t.Name, err)
	}
	err = svc.AddEndpoint(t.Name, micro.HandlerFunc(func(req micro.Request) { handle(req, t, h) }),
		micro.WithEndpointSubject(SubjectPrefix+t.Name), micro.WithEndpointMetadata(t.Metadata()))
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("serve %s: %w", t.Name, err)
	}
	return svc, nil
}

func handle(req micro.Request, t Tool, h HandlerFunc) {
	hd := req.Headers()
	if hd.Get(HeaderDescribe) != "" {
		_ = req.RespondJSON(t.Metadata())
		return
	}
	ctx := context.Background()
	if d, err := time.Parse(time.RFC3339Nano, hd.Get(HeaderDeadline)); err == nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d)
		defer cancel()
	}
	r := &Request{CallID: hd.Get(HeaderCallID), Agent: hd.Get(HeaderAgent), SessionID: hd.Get(HeaderSession),
		Arguments: json.RawMessage(req.Data())}
	res, err := safeCall(ctx, h, r)
	if err != nil {
		res = &Result{Content: err.Error(), IsError: true}
	}
	b, err := json.Marshal(res)
	if err != nil {
		_ = req.Error("500", "encode result: "+err.Error(), nil)
		return
	}
	_ = req.Respond(b)
}

func safeCall(ctx context.Context, h HandlerFunc, r *Request) (res *Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, fmt.Errorf("tool panicked: %v", p)
		}
	}()
	res, err = h(ctx, r)
	if err == nil && res == nil {
		res = &Result{}
	}
	return res, err
}
