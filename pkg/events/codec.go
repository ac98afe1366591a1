package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
)

// Mode is the CloudEvents content mode a message uses.
type Mode int

// Content modes. Results go out in the mode their call came in.
const (
	// Binary: attributes in ce-* NATS headers, data as the payload.
	Binary Mode = iota
	// Structured: the event's JSON as the payload, marked by
	// content-type: application/cloudevents+json.
	Structured
	// StructuredBare: the event's JSON as the whole payload and no headers,
	// as the CloudEvents SDKs' NATS senders write it (NATS binding 1.0.1).
	StructuredBare
)

// String returns the Mode as written in documents and logs.
func (m Mode) String() string {
	switch m {
	case Binary:
		return "binary"
	case Structured:
		return "structured"
	case StructuredBare:
		return "structured-bare"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Header names used on the wire.
const (
	HeaderContentType = "content-type"
	HeaderMsgID       = nats.MsgIdHdr // Nats-Msg-Id, the JetStream dedup id
	ContentTypeJSON   = "application/json"
	ContentTypeCE     = "application/cloudevents+json"
	SpecVersion       = "1.0"
	headerPrefix      = "ce-"
)

// Decoding errors, for errors.Is.
var (
	ErrNotCloudEvent = errors.New("not a CloudEvent")
	ErrSpecVersion   = errors.New("unsupported specversion")
	ErrMissingID     = errors.New("missing id")
	ErrMissingAttr   = errors.New("missing required attribute")
	ErrInvalidJSON   = errors.New("invalid JSON")
	ErrWrongType     = errors.New("wrong event type")
)

// DecodeError says what is wrong with a message and, when the message
// carried one, the event id it tried to decode.
type DecodeError struct {
	Err    error
	ID     string
	Detail string
}

// Error says what is wrong, for a person.
func (e *DecodeError) Error() string {
	if e.Detail == "" {
		return e.Err.Error()
	}
	return e.Err.Error() + ": " + e.Detail
}

// Unwrap returns the sentinel.
func (e *DecodeError) Unwrap() error { return e.Err }

// Decode reads a CloudEvent from a NATS message's header and data in any of
// the three modes and reports the mode it found.
func Decode(h nats.Header, data []byte) (event.Event, Mode, error) {
	if sv := headerGet(h, headerPrefix+"specversion"); sv != "" {
		ev, err := decodeBinary(h, data, sv)
		return ev, Binary, err
	}
	ct := headerGet(h, HeaderContentType)
	mode := StructuredBare
	if ct != "" {
		if !strings.HasPrefix(strings.ToLower(ct), ContentTypeCE) {
			return event.Event{}, Binary, &DecodeError{Err: ErrNotCloudEvent, Detail: "no ce-specversion header and content-type is " + ct}
		}
		mode = Structured
	}
	ev, err := decodeStructured(data, mode)
	return ev, mode, err
}

func decodeBinary(h nats.Header, data []byte, sv string) (event.Event, error) {
	id := unescape(headerGet(h, headerPrefix+"id"))
	if sv != SpecVersion {
		return event.Event{}, &DecodeError{Err: ErrSpecVersion, ID: id, Detail: fmt.Sprintf("ce-specversion is %q, want %q", sv, SpecVersion)}
	}
	ev := event.New(SpecVersion)
	for k, vs := range h {
		lk := strings.ToLower(k)
		if !strings.HasPrefix(lk, headerPrefix) || len(vs) == 0 {
			continue
		}
		name, v := lk[len(headerPrefix):], unescape(vs[0])
		switch name {
		case "specversion":
		case "id":
			ev.SetID(v)
		case "source":
			ev.SetSource(v)
		case "type":
			ev.SetType(v)
		case "subject":
			ev.SetSubject(v)
		case "dataschema":
			ev.SetDataSchema(v)
		case "time":
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return event.Event{}, &DecodeError{Err: ErrMissingAttr, ID: id, Detail: "ce-time is not RFC 3339: " + v}
			}
			ev.SetTime(t)
		default:
			if !validExtensionName(name) {
				continue
			}
			ev.SetExtension(name, v)
		}
	}
	if ct := headerGet(h, HeaderContentType); ct != "" {
		ev.SetDataContentType(ct)
	}
	if len(data) > 0 {
		ev.DataEncoded = data
	}
	if err := checkRequired(ev); err != nil {
		return event.Event{}, err
	}
	return ev, nil
}

func decodeStructured(data []byte, mode Mode) (event.Event, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		what := "an empty payload"
		if len(data) > 0 {
			what = "a payload that is not a JSON object"
		}
		return event.Event{}, &DecodeError{Err: ErrNotCloudEvent, Detail: "no ce-specversion header and " + what}
	}
	var probe struct {
		SpecVersion *string `json:"specversion"`
		ID          string  `json:"id"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return event.Event{}, &DecodeError{Err: ErrInvalidJSON, Detail: err.Error()}
	}
	if probe.SpecVersion == nil {
		d := "JSON payload without specversion and no ce-specversion header"
		if mode == Structured {
			d = "structured event without specversion"
		}
		return event.Event{}, &DecodeError{Err: ErrNotCloudEvent, ID: probe.ID, Detail: d}
	}
	if *probe.SpecVersion != SpecVersion {
		return event.Event{}, &DecodeError{Err: ErrSpecVersion, ID: probe.ID, Detail: fmt.Sprintf("specversion is %q, want %q", *probe.SpecVersion, SpecVersion)}
	}
	ev := event.New()
	if err := json.Unmarshal(data, &ev); err != nil {
		return event.Event{}, &DecodeError{Err: ErrInvalidJSON, ID: probe.ID, Detail: err.Error()}
	}
	if err := checkRequired(ev); err != nil {
		return event.Event{}, err
	}
	return ev, nil
}

func checkRequired(ev event.Event) error {
	if ev.ID() == "" {
		return &DecodeError{Err: ErrMissingID, Detail: "the event has no id (ce-id)"}
	}
	if ev.Source() == "" {
		return &DecodeError{Err: ErrMissingAttr, ID: ev.ID(), Detail: "source"}
	}
	if ev.Type() == "" {
		return &DecodeError{Err: ErrMissingAttr, ID: ev.ID(), Detail: "type"}
	}
	return nil
}

// Encode writes ev as a NATS message on subject in mode. The event id is
// also set as Nats-Msg-Id so JetStream drops a duplicate publish.
func Encode(subject string, ev event.Event, mode Mode) (*nats.Msg, error) {
	m := nats.NewMsg(subject)
	switch mode {
	case Binary:
		m.Header.Set(headerPrefix+"specversion", SpecVersion)
		m.Header.Set(headerPrefix+"id", escape(ev.ID()))
		m.Header.Set(headerPrefix+"source", escape(ev.Source()))
		m.Header.Set(headerPrefix+"type", escape(ev.Type()))
		if s := ev.Subject(); s != "" {
			m.Header.Set(headerPrefix+"subject", escape(s))
		}
		if t := ev.Time(); !t.IsZero() {
			m.Header.Set(headerPrefix+"time", t.UTC().Format(time.RFC3339Nano))
		}
		if s := ev.DataSchema(); s != "" {
			m.Header.Set(headerPrefix+"dataschema", escape(s))
		}
		for k, v := range ev.Extensions() {
			m.Header.Set(headerPrefix+k, escape(fmt.Sprint(v)))
		}
		if ct := ev.DataContentType(); ct != "" {
			m.Header.Set(HeaderContentType, ct)
		}
		m.Data = ev.Data()
	case Structured, StructuredBare:
		b, err := json.Marshal(ev)
		if err != nil {
			return nil, fmt.Errorf("encode event %s: %w", ev.ID(), err)
		}
		m.Data = b
		if mode == Structured {
			m.Header.Set(HeaderContentType, ContentTypeCE)
		}
	default:
		return nil, fmt.Errorf("encode event %s: unknown mode %v", ev.ID(), mode)
	}
	m.Header.Set(HeaderMsgID, ev.ID())
	return m, nil
}

// New builds an event with data marshalled as JSON.
func New(id, source, typ string, data any) (event.Event, error) {
	ev := event.New(SpecVersion)
	ev.SetID(id)
	ev.SetSource(source)
	ev.SetType(typ)
	ev.SetTime(time.Now().UTC())
	b, err := marshalData(data)
	if err != nil {
		return ev, fmt.Errorf("marshal %s data: %w", typ, err)
	}
	ev.SetDataContentType(ContentTypeJSON)
	ev.DataEncoded = b
	return ev, nil
}

// MsgID returns a message's Nats-Msg-Id header.
func MsgID(h nats.Header) string { return headerGet(h, HeaderMsgID) }

// headerGet reads a header case-insensitively (nats.Header is case-sensitive).
func headerGet(h nats.Header, key string) string {
	if v := h.Get(key); v != "" {
		return v
	}
	for k, vs := range h {
		if len(vs) > 0 && strings.EqualFold(k, key) {
			return vs[0]
		}
	}
	return ""
}

// escape percent-encodes what may not stand raw in a header value: '%',
// control characters, space, '"' and non-ASCII (CloudEvents HTTP/NATS rule).
func escape(s string) string {
	need := false
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '%' || c == '"' {
			need = true
			break
		}
	}
	if !need {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '%' || c == '"' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	u, err := url.PathUnescape(s)
	if err != nil {
		return s
	}
	return u
}

func validExtensionName(n string) bool {
	if n == "" || len(n) > 20 {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// NewMessage builds a binary-mode event message on subject with data as
// JSON, deduplicated by id: what every toolgate publisher sends.
func NewMessage(subject, id, source, typ string, data any) (*nats.Msg, error) {
	return EncodeData(subject, Attrs{ID: id, Source: source, Type: typ}, data, Binary)
}
