package events

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestRoundTripEveryMode(t *testing.T) {
	ev, err := NewCall("call-1", "agent-7", CallData{Arguments: json.RawMessage(`{"path":"a b%\"ü"}`), SessionID: "s 1", TimeoutMS: 5})
	if err != nil {
		t.Fatal(err)
	}
	ev.SetExtension("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	for _, mode := range []Mode{Binary, Structured, StructuredBare} {
		t.Run(mode.String(), func(t *testing.T) {
			m, err := Encode(CallSubject("agent-7", "read"), ev, mode)
			if err != nil {
				t.Fatal(err)
			}
			if m.Header.Get(nats.MsgIdHdr) != "call-1" {
				t.Fatal("no Nats-Msg-Id")
			}
			c, err := DecodeCall(m.Subject, m.Header, m.Data, 0)
			if err != nil {
				t.Fatal(err)
			}
			if c.Mode != mode || c.ID != "call-1" || c.Agent != "agent-7" || c.Tool != "read" || c.Data.SessionID != "s 1" ||
				c.Data.TimeoutMS != 5 || string(c.Data.Arguments) != `{"path":"a b%\"ü"}` || !strings.HasPrefix(c.TraceParent, "00-0af7") {
				t.Fatalf("decoded %+v", c)
			}
		})
	}
}

func TestHeaderValuesArePercentEncoded(t *testing.T) {
	ev, _ := New("id-1", "agent://a", TypeCallRequested, map[string]any{})
	ev.SetSubject("naïve \"subject\" 100%")
	m, err := Encode("x", ev, Binary)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get("ce-subject"); got != "na%C3%AFve%20%22subject%22%20100%25" {
		t.Fatalf("ce-subject = %q", got)
	}
	back, _, err := Decode(m.Header, m.Data)
	if err != nil || back.Subject() != "naïve \"subject\" 100%" {
		t.Fatalf("decoded subject %q, %v", back.Subject(), err)
	}
	// Header names are matched case-insensitively.
	h := nats.Header{"Ce-Specversion": {"1.0"}, "CE-ID": {"x"}, "ce-Source": {"agent://a"}, "Ce-Type": {TypeCallRequested}}
	if _, mode, err := Decode(h, nil); err != nil || mode != Binary {
		t.Fatalf("mixed-case headers: %v", err)
	}
}

func TestDecodeCallErrors(t *testing.T) {
	bin := func(kv ...string) nats.Header {
		h := nats.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	ok := bin("ce-specversion", "1.0", "ce-id", "c1", "ce-source", "agent://a", "ce-type", TypeCallRequested, "content-type", "application/json")
	cases := []struct {
		name    string
		subject string
		h       nats.Header
		data    string
		want    error
		code    string
	}{
		{"plain text", "toolgate.call.a.t", nil, "hello", ErrNotCloudEvent, CodeInvalidEvent},
		{"empty", "toolgate.call.a.t", nil, "", ErrNotCloudEvent, CodeInvalidEvent},
		{"JSON without specversion", "toolgate.call.a.t", nil, `{"id":"x"}`, ErrNotCloudEvent, CodeInvalidEvent},
		{"other content type", "toolgate.call.a.t", bin("content-type", "text/plain"), `{}`, ErrNotCloudEvent, CodeInvalidEvent},
		{"binary 0.3", "toolgate.call.a.t", bin("ce-specversion", "0.3", "ce-id", "c1"), `{}`, ErrSpecVersion, CodeInvalidEvent},
		{"structured 0.3", "toolgate.call.a.t", nil, `{"specversion":"0.3","id":"c1"}`, ErrSpecVersion, CodeInvalidEvent},
		{"binary no id", "toolgate.call.a.t", bin("ce-specversion", "1.0", "ce-source", "agent://a", "ce-type", TypeCallRequested), `{}`, ErrMissingID, CodeInvalidEvent},
		{"structured no source", "toolgate.call.a.t", nil, `{"specversion":"1.0","id":"c1","type":"t"}`, ErrMissingAttr, CodeInvalidEvent},
		{"broken JSON", "toolgate.call.a.t", nil, `{"specversion":"1.0",`, ErrInvalidJSON, CodeInvalidJSON},
		{"bad data", "toolgate.call.a.t", ok, `{"arguments":`, ErrInvalidJSON, CodeInvalidJSON},
		{"data not an object", "toolgate.call.a.t", ok, `[1,2]`, ErrInvalidJSON, CodeInvalidJSON},
		{"negative timeout", "toolgate.call.a.t", ok, `{"timeout_ms":-1}`, ErrInvalidJSON, CodeInvalidJSON},
		{"wrong type", "toolgate.call.a.t", bin("ce-specversion", "1.0", "ce-id", "c1", "ce-source", "agent://a", "ce-type", "x.y"), `{}`, ErrWrongType, CodeInvalidEvent},
		{"source of another agent", "toolgate.call.a.t", bin("ce-specversion", "1.0", "ce-id", "c1", "ce-source", "agent://b", "ce-type", TypeCallRequested), `{}`, ErrSourceMismatch, CodeSourceMismatch},
		{"source not an agent URI", "toolgate.call.a.t", bin("ce-specversion", "1.0", "ce-id", "c1", "ce-source", "https://a", "ce-type", TypeCallRequested), `{}`, ErrSourceMismatch, CodeSourceMismatch},
		{"id not a token", "toolgate.call.a.t", bin("ce-specversion", "1.0", "ce-id", "a.b", "ce-source", "agent://a", "ce-type", TypeCallRequested), `{}`, ErrMissingID, CodeInvalidEvent},
		{"subject too long", "toolgate.call.a.t.u", ok, `{}`, ErrBadSubject, CodeInvalidSubject},
		{"too large", "toolgate.call.a.t", ok, strings.Repeat(" ", 100), ErrPayloadTooLarge, CodePayloadTooLarge},
		{"data content type not JSON", "toolgate.call.a.t", bin("ce-specversion", "1.0", "ce-id", "c1", "ce-source", "agent://a", "ce-type", TypeCallRequested, "content-type", "text/plain"), `{}`, ErrInvalidJSON, CodeInvalidJSON},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeCall(tc.subject, tc.h, []byte(tc.data), 64)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if ErrorCode(err) != tc.code {
				t.Fatalf("code = %s, want %s", ErrorCode(err), tc.code)
			}
			if err.Error() == "" {
				t.Fatal("empty message")
			}
		})
	}
}

// TestGoldenResult pins the wire form of a result in each mode.
func TestGoldenResult(t *testing.T) {
	res := ResultData{CallID: "c1", Agent: "agent-7", Tool: "read", Status: StatusOK, Output: "     1\thello\n",
		Metadata: map[string]any{"total_lines": 1}, Decision: &Decision{Action: "allow", Rule: "tools.read.action", Revision: "abc"}, DurationMS: 3}
	ev, err := New("agent-7.c1:result", "toolgate://worker/w1", TypeCallCompleted, res)
	if err != nil {
		t.Fatal(err)
	}
	ev.SetTime(time.Date(2026, 11, 22, 1, 2, 3, 0, time.UTC))
	ev.SetSubject("c1")
	for _, mode := range []Mode{Binary, Structured, StructuredBare} {
		m, err := Encode(ResultSubject("agent-7", "c1"), ev, mode)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		b.WriteString("subject: " + m.Subject + "\n")
		for _, k := range sortedKeys(m.Header) {
			b.WriteString(k + ": " + m.Header.Get(k) + "\n")
		}
		b.WriteString("\n" + string(m.Data) + "\n")
		golden := filepath.Join("testdata", "result."+mode.String()+".golden")
		if *update {
			if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run with -update to create)", err)
		}
		if b.String() != string(want) {
			t.Fatalf("%s differs:\n%s\nwant:\n%s", golden, b.String(), want)
		}
	}
}

func sortedKeys(h nats.Header) []string {
	var ks []string
	for k := range h {
		ks = append(ks, k)
	}
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			if ks[j] < ks[i] {
				ks[i], ks[j] = ks[j], ks[i]
			}
		}
	}
	return ks
}

// FuzzDecodeCall: the decoder never panics, and whatever it accepts is a
// well-formed call from the subject's agent.
func FuzzDecodeCall(f *testing.F) {
	ev, _ := NewCall("c1", "a", CallData{Arguments: json.RawMessage(`{"x":1}`)})
	for _, mode := range []Mode{Binary, Structured, StructuredBare} {
		m, _ := Encode(CallSubject("a", "t"), ev, mode)
		f.Add(m.Header.Get("ce-specversion"), m.Header.Get("ce-id"), m.Header.Get("ce-source"), m.Header.Get("content-type"), m.Data)
	}
	f.Add("", "", "", "", []byte(`{"specversion":"1.0","id":"x","source":"agent://a","type":"dev.toolgate.call.requested.v1","data":{"arguments":null}}`))
	f.Fuzz(func(t *testing.T, sv, id, source, ct string, data []byte) {
		h := nats.Header{}
		if sv != "" {
			h.Set("ce-specversion", sv)
			h.Set("ce-id", id)
			h.Set("ce-source", source)
			h.Set("ce-type", TypeCallRequested)
		}
		if ct != "" {
			h.Set("content-type", ct)
		}
		c, err := DecodeCall("toolgate.call.a.t", h, data, 1<<16)
		if c == nil {
			t.Fatal("nil call")
		}
		slow, serr := decodeCall("toolgate.call.a.t", h, data, 1<<16, false)
		if (err == nil) != (serr == nil) || !reflect.DeepEqual(c, slow) {
			t.Fatalf("fast path %+v %v, general path %+v %v", c, err, slow, serr)
		}
		if err != nil {
			if ErrorCode(err) == "" || err.Error() == "" {
				t.Fatalf("error without code or message: %v", err)
			}
			return
		}
		if c.Agent != "a" || c.Tool != "t" || ValidToken(c.ID) != nil || c.Source != "agent://a" || !json.Valid(c.Data.Arguments) {
			t.Fatalf("accepted a malformed call: %+v", c)
		}
	})
}
