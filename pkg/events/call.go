package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
)

// Errors of call decoding beyond the CloudEvents ones.
var (
	ErrPayloadTooLarge = errors.New("payload too large")
	ErrSourceMismatch  = errors.New("source does not match subject")
	ErrBadSubject      = errors.New("malformed call subject")
)

// Error codes carried in ResultData.Error.
const (
	CodeInvalidEvent     = "invalid_event"
	CodeInvalidJSON      = "invalid_json"
	CodeInvalidArguments = "invalid_arguments"
	CodeUnknownTool      = "unknown_tool"
	CodePayloadTooLarge  = "payload_too_large"
	CodeSourceMismatch   = "source_mismatch"
	CodeInvalidSubject   = "invalid_subject"
	CodeInternal         = "internal"
	CodeBudgetExceeded   = "budget_exceeded"
	// CodeTooManyParked: the agent has as many calls waiting for people as
	// a worker parks for one agent; the call was not parked.
	CodeTooManyParked = "too_many_parked"
)

// ErrorCode maps a decoding error to the code put in the error result.
func ErrorCode(err error) string {
	switch {
	case errors.Is(err, ErrPayloadTooLarge):
		return CodePayloadTooLarge
	case errors.Is(err, ErrSourceMismatch):
		return CodeSourceMismatch
	case errors.Is(err, ErrBadSubject):
		return CodeInvalidSubject
	case errors.Is(err, ErrInvalidJSON):
		return CodeInvalidJSON
	default:
		return CodeInvalidEvent
	}
}

// Call is a decoded call request. When DecodeCall fails, the fields it could
// read (Agent, Tool, ID, Mode) are still set so an error result can reach
// the agent.
type Call struct {
	ID     string
	Agent  string
	Tool   string
	Source string
	Mode   Mode
	Data   CallData
	// TraceParent is the W3C trace context from the distributed-tracing
	// extension, if any.
	TraceParent string
	// TraceState is the vendor trace state that came with TraceParent.
	TraceState string
}

// DecodeCall decodes the call published on subject. The <agent> token of the
// subject is the caller's identity; a source naming another agent is
// refused. maxPayload bounds the message data (0: no bound).
func DecodeCall(subject string, h nats.Header, data []byte, maxPayload int) (*Call, error) {
	return decodeCall(subject, h, data, maxPayload, true)
}

// decodeCall is DecodeCall, with the fast path for plain binary calls
// when fast is set (the tests compare both paths).
func decodeCall(subject string, h nats.Header, data []byte, maxPayload int, fast bool) (*Call, error) {
	c := &Call{ID: MsgID(h)}
	parts := strings.Split(subject, ".")
	if len(parts) >= 3 {
		c.Agent = parts[2]
	}
	if len(parts) >= 4 {
		c.Tool = strings.Join(parts[3:], ".")
	}
	if len(parts) != 4 || parts[0] != Prefix || parts[1] != "call" {
		return c, &DecodeError{Err: ErrBadSubject, Detail: fmt.Sprintf("subject %q is not %s.call.<agent>.<tool>", subject, Prefix)}
	}
	if maxPayload > 0 && len(data) > maxPayload {
		return c, &DecodeError{Err: ErrPayloadTooLarge, ID: c.ID, Detail: fmt.Sprintf("payload is %d bytes, the limit is %d", len(data), maxPayload)}
	}
	if fast && decodeCallFast(c, h, data) {
		return c, nil
	}
	ev, mode, err := Decode(h, data)
	c.Mode = mode
	if err != nil {
		var de *DecodeError
		if errors.As(err, &de) && de.ID != "" {
			c.ID = de.ID
		}
		return c, err
	}
	c.ID, c.Source = ev.ID(), ev.Source()
	if err := ValidToken(c.ID); err != nil {
		bad := c.ID
		c.ID = ""
		return c, &DecodeError{Err: ErrMissingID, Detail: fmt.Sprintf("id %q cannot be a subject token (%v)", bad, err)}
	}
	if err := ValidToken(c.Agent); err != nil {
		return c, &DecodeError{Err: ErrBadSubject, ID: c.ID, Detail: err.Error()}
	}
	if ev.Type() != TypeCallRequested {
		return c, &DecodeError{Err: ErrWrongType, ID: c.ID, Detail: fmt.Sprintf("type is %q, want %q", ev.Type(), TypeCallRequested)}
	}
	if agent, ok := SourceAgent(ev.Source()); !ok || agent != c.Agent {
		return c, &DecodeError{Err: ErrSourceMismatch, ID: c.ID, Detail: fmt.Sprintf("source %q, but the call was published as agent %q (want %q)", ev.Source(), c.Agent, AgentSource(c.Agent))}
	}
	if tp, ok := ev.Extensions()["traceparent"]; ok {
		c.TraceParent = fmt.Sprint(tp)
	}
	if ts, ok := ev.Extensions()["tracestate"]; ok {
		c.TraceState = fmt.Sprint(ts)
	}
	if err := decodeCallData(ev, &c.Data); err != nil {
		return c, &DecodeError{Err: ErrInvalidJSON, ID: c.ID, Detail: err.Error()}
	}
	return c, nil
}

func decodeCallData(ev event.Event, d *CallData) error {
	return decodeCallJSON(ev.Data(), ev.DataMediaType(), d)
}

// decodeCallJSON reads a call's data of media type ct (empty: unsaid).
func decodeCallJSON(data []byte, ct string, d *CallData) error {
	raw := bytes.TrimSpace(data)
	if len(raw) == 0 {
		d.Arguments = json.RawMessage("{}")
		return nil
	}
	if ct != "" && ct != ContentTypeJSON && !strings.HasSuffix(ct, "+json") {
		return fmt.Errorf("data content type is %q, want %s", ct, ContentTypeJSON)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(d); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	if dec.More() {
		return fmt.Errorf("data: trailing data after the object")
	}
	if len(bytes.TrimSpace(d.Arguments)) == 0 || string(bytes.TrimSpace(d.Arguments)) == "null" {
		d.Arguments = json.RawMessage("{}")
	}
	if d.TimeoutMS < 0 {
		return fmt.Errorf("data: timeout_ms is negative (%d)", d.TimeoutMS)
	}
	if d.ParentCallID != "" {
		if err := ValidToken(d.ParentCallID); err != nil {
			return fmt.Errorf("data: parent_call_id: %w", err)
		}
	}
	return nil
}

// NewCall builds the call event an agent publishes.
func NewCall(id, agent string, data CallData) (event.Event, error) {
	return New(id, AgentSource(agent), TypeCallRequested, data)
}

// DecodeData unmarshals the JSON data of an event received on the bus, in
// any mode, into v.
func DecodeData(h nats.Header, data []byte, v any) (event.Event, error) {
	ev, _, err := Decode(h, data)
	if err != nil {
		return ev, err
	}
	if err := json.Unmarshal(ev.Data(), v); err != nil {
		return ev, &DecodeError{Err: ErrInvalidJSON, ID: ev.ID(), Detail: err.Error()}
	}
	return ev, nil
}
