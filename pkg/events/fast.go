package events

import (
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
)

// The fast paths below build and read the binary-mode messages toolgate
// itself writes without going through an event.Event (whose setters parse
// URLs and allocate maps). Each takes only input it can handle exactly as
// the general path would, and otherwise hands over to it, so the two
// never disagree; the tests hold them to that.

// Attrs are the context attributes of an event to encode.
type Attrs struct {
	ID, Source, Type string
	// Subject is the optional subject attribute.
	Subject string
	// TraceParent is the optional distributed-tracing extension.
	TraceParent string
	// Sign, when set, signs the event (ExtSignature, ExtSigner).
	Sign SignFunc
}

// EncodeData builds the message of an event with data marshalled as JSON,
// on subject, in mode: the message New and Encode would build, with the
// same Nats-Msg-Id, signed by a.Sign when set.
func EncodeData(subject string, a Attrs, data any, mode Mode) (*nats.Msg, error) {
	u, err := EncodeUnsigned(subject, a, data, mode)
	if err != nil {
		return nil, err
	}
	var sig, signer string
	if a.Sign != nil {
		if sig, signer, err = a.Sign(u.Input()); err != nil {
			return nil, fmt.Errorf("sign %s: %w", a.ID, err)
		}
	}
	return u.Signed(sig, signer)
}

// Unsigned is an event encoded but for its signature: its signing input
// is known (Input) and Signed completes its message, so that the
// signature can be made afterwards, over several events at once.
type Unsigned struct {
	a Attrs
	// The fast path's message without its signature headers, and the
	// backing array of its header values (room left for them).
	m    *nats.Msg
	vals []string
	// The general path's event, subject and mode (m nil).
	ev      event.Event
	subject string
	mode    Mode
	input   []byte
}

// EncodeUnsigned builds the message of an event as EncodeData does,
// but for its signature (a.Sign is not called): Signed adds it.
func EncodeUnsigned(subject string, a Attrs, data any, mode Mode) (Unsigned, error) {
	a.Sign = nil
	if mode != Binary || !plain(a.ID) || !plainURI(a.Source) || !plain(a.Type) || !optPlain(a.Subject) || !optPlain(a.TraceParent) {
		ev, err := New(a.ID, a.Source, a.Type, data)
		if err != nil {
			return Unsigned{}, err
		}
		if a.Subject != "" {
			ev.SetSubject(a.Subject)
		}
		if a.TraceParent != "" {
			ev.SetExtension("traceparent", a.TraceParent)
		}
		return Unsigned{a: a, ev: ev, subject: subject, mode: mode}, nil
	}
	b, err := marshalData(data)
	if err != nil {
		return Unsigned{}, fmt.Errorf("marshal %s data: %w", a.Type, err)
	}
	// One backing array for the header's values: a slice literal per
	// header would be an allocation each.
	vals := make([]string, 0, 11)
	h := make(nats.Header, 11)
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set(headerPrefix+"specversion", SpecVersion)
	set(headerPrefix+"id", a.ID)
	set(headerPrefix+"source", a.Source)
	set(headerPrefix+"type", a.Type)
	if a.Subject != "" {
		set(headerPrefix+"subject", a.Subject)
	}
	set(headerPrefix+"time", time.Now().UTC().Format(time.RFC3339Nano))
	if a.TraceParent != "" {
		set(headerPrefix+"traceparent", a.TraceParent)
	}
	set(HeaderContentType, ContentTypeJSON)
	set(HeaderMsgID, a.ID)
	return Unsigned{a: a, m: &nats.Msg{Subject: subject, Header: h, Data: b}, vals: vals}, nil
}

// Input is the event's SigningInput, what its signature covers.
func (u *Unsigned) Input() []byte {
	if u.input == nil {
		if u.m != nil {
			u.input = SigningInput(u.a.Type, u.a.Source, u.a.ID, u.a.Subject, u.m.Data)
		} else {
			u.input = EventSigningInput(u.ev)
		}
	}
	return u.input
}

// ID is the event's id.
func (u *Unsigned) ID() string { return u.a.ID }

// Signed returns the event's message with sig and signer as its
// signature attributes (ExtSignature, ExtSigner); unsigned when sig is
// empty. It is called once.
func (u *Unsigned) Signed(sig, signer string) (*nats.Msg, error) {
	if u.m == nil {
		if sig != "" {
			u.ev.SetExtension(ExtSignature, sig)
			u.ev.SetExtension(ExtSigner, signer)
		}
		return Encode(u.subject, u.ev, u.mode)
	}
	if sig != "" {
		u.vals = append(u.vals, sig, signer)
		n := len(u.vals)
		u.m.Header[headerPrefix+ExtSignature] = u.vals[n-2 : n-1 : n-1]
		u.m.Header[headerPrefix+ExtSigner] = u.vals[n-1 : n : n]
	}
	return u.m, nil
}

// decodeCallFast reads a binary-mode call whose attributes need no
// unescaping or normalising into c (subject fields already set); false
// means the general path must decide.
func decodeCallFast(c *Call, h nats.Header, data []byte) bool {
	var id, source, typ, tm, tp string
	sv := false
	for k, vs := range h {
		if len(k) < 3 || (k[0]|0x20) != 'c' || (k[1]|0x20) != 'e' || k[2] != '-' {
			continue
		}
		if len(vs) != 1 || !plain(vs[0]) || !lower(k) {
			return false
		}
		switch k[3:] {
		case "specversion":
			if vs[0] != SpecVersion {
				return false
			}
			sv = true
		case "id":
			id = vs[0]
		case "source":
			source = vs[0]
		case "type":
			typ = vs[0]
		case "time":
			tm = vs[0]
		case "traceparent":
			tp = vs[0]
		}
	}
	if !sv || id == "" || typ != TypeCallRequested || !safeAgent(c.Agent) || source != AgentSource(c.Agent) || ValidToken(id) != nil {
		return false
	}
	if tm != "" {
		if _, err := time.Parse(time.RFC3339Nano, tm); err != nil {
			return false
		}
	}
	ct, ok := h[HeaderContentType]
	if ok && (len(ct) != 1 || ct[0] != ContentTypeJSON) {
		return false
	}
	var d CallData
	if err := decodeCallJSON(data, ContentTypeJSON, &d); err != nil {
		return false
	}
	c.ID, c.Source, c.Mode, c.Data, c.TraceParent = id, source, Binary, d, tp
	return true
}

// plain reports whether s stands in a header as it is: non-empty, nothing
// escape would encode, nothing a setter would trim.
func plain(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '%' || c == '"' {
			return false
		}
	}
	return true
}

func optPlain(s string) bool { return s == "" || plain(s) }

// plainURI reports whether s is a URI that parses back to itself: a scheme,
// "://", and unreserved characters and slashes only.
func plainURI(s string) bool {
	i := 0
	for i < len(s) && (s[i] >= 'a' && s[i] <= 'z') {
		i++
	}
	if i == 0 || len(s) < i+4 || s[i:i+3] != "://" {
		return false
	}
	for j := i + 3; j < len(s); j++ {
		c := s[j]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
			return false
		}
	}
	return true
}

// safeAgent reports whether agent://<agent> is a plain URI.
func safeAgent(a string) bool { return a != "" && plainURI(AgentSource(a)) && !containsByte(a, '/') }

func containsByte(s string, b byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == b {
			return true
		}
	}
	return false
}

func lower(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 'A' && s[i] <= 'Z' {
			return false
		}
	}
	return true
}
