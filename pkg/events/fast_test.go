package events

import (
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// callMessage is a binary call as an agent's SDK writes it, before the
// test's changes.
func callMessage(t testing.TB, agent string) *nats.Msg {
	t.Helper()
	ev, err := NewCall("call-1", agent, CallData{Arguments: json.RawMessage(`{"path":"a.txt"}`), SessionID: "s1", TimeoutMS: 500})
	if err != nil {
		t.Fatal(err)
	}
	ev.SetExtension("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	m, err := Encode(CallSubject(agent, "read"), ev, Binary)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestDecodeCallFastPathAgreesWithTheGeneralPath holds the fast path to
// the general one: for each message both decode to the same call or both
// refuse it with the same error.
func TestDecodeCallFastPathAgreesWithTheGeneralPath(t *testing.T) {
	for _, c := range []struct {
		name   string
		agent  string
		change func(m *nats.Msg)
	}{
		{"as written", "agent-1", func(*nats.Msg) {}},
		{"no time", "agent-1", func(m *nats.Msg) { delete(m.Header, "ce-time") }},
		{"bad time", "agent-1", func(m *nats.Msg) { m.Header.Set("ce-time", "yesterday") }},
		{"escaped id", "agent-1", func(m *nats.Msg) { m.Header.Set("ce-id", "call%2D1") }},
		{"escaped dot in id", "agent-1", func(m *nats.Msg) { m.Header.Set("ce-id", "call%2E1") }},
		{"upper-case keys", "agent-1", func(m *nats.Msg) { m.Header["CE-ID"] = m.Header["ce-id"]; delete(m.Header, "ce-id") }},
		{"no specversion", "agent-1", func(m *nats.Msg) { delete(m.Header, "ce-specversion") }},
		{"other specversion", "agent-1", func(m *nats.Msg) { m.Header.Set("ce-specversion", "0.3") }},
		{"other type", "agent-1", func(m *nats.Msg) { m.Header.Set("ce-type", "x") }},
		{"other agent's source", "agent-1", func(m *nats.Msg) { m.Header.Set("ce-source", "agent://agent-2") }},
		{"source with a path", "agent-1", func(m *nats.Msg) { m.Header.Set("ce-source", "agent://agent-1/x") }},
		{"no id", "agent-1", func(m *nats.Msg) { delete(m.Header, "ce-id") }},
		{"two ids", "agent-1", func(m *nats.Msg) { m.Header.Add("ce-id", "call-2") }},
		{"text content type", "agent-1", func(m *nats.Msg) { m.Header.Set("content-type", "text/plain") }},
		{"json content type with parameters", "agent-1", func(m *nats.Msg) { m.Header.Set("content-type", "application/json; charset=utf-8") }},
		{"no content type", "agent-1", func(m *nats.Msg) { delete(m.Header, "content-type") }},
		{"unknown field", "agent-1", func(m *nats.Msg) { m.Data = []byte(`{"arguments":{},"sudo":true}`) }},
		{"trailing data", "agent-1", func(m *nats.Msg) { m.Data = []byte(`{"arguments":{}} {}`) }},
		{"null arguments", "agent-1", func(m *nats.Msg) { m.Data = []byte(`{"arguments":null}`) }},
		{"empty data", "agent-1", func(m *nats.Msg) { m.Data = nil }},
		{"negative timeout", "agent-1", func(m *nats.Msg) { m.Data = []byte(`{"arguments":{},"timeout_ms":-1}`) }},
		{"agent needing escapes", "ag%ent", func(*nats.Msg) {}},
		{"unicode agent", "agént", func(*nats.Msg) {}},
		{"extra extension", "agent-1", func(m *nats.Msg) { m.Header.Set("ce-x", "y") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := callMessage(t, c.agent)
			c.change(m)
			fast, ferr := decodeCall(m.Subject, m.Header, m.Data, 1<<20, true)
			slow, serr := decodeCall(m.Subject, m.Header, m.Data, 1<<20, false)
			if (ferr == nil) != (serr == nil) || (ferr != nil && ferr.Error() != serr.Error()) {
				t.Fatalf("fast path error %v, general path error %v", ferr, serr)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("fast path %+v, general path %+v", fast, slow)
			}
		})
	}
}

// TestEncodeDataFastPathAgreesWithNewAndEncode holds EncodeData to the
// message New and Encode build, unsigned and signed; and EncodeUnsigned
// with the signature added afterwards (Signed) to both.
func TestEncodeDataFastPathAgreesWithNewAndEncode(t *testing.T) {
	data := ResultData{CallID: "c1", Agent: "a1", Tool: "read", Status: StatusOK, Output: "x"}
	// a signature of the co-signed form's shape, made from the input
	sign := func(input []byte) (string, string, error) {
		return "sig." + EventHash(input)[:16] + ".2.salt.path", "jwt", nil
	}
	for _, a := range []Attrs{
		{ID: "a1.c1:result", Source: "toolgate://worker/w1", Type: TypeCallCompleted},
		{ID: "a1.c1:result", Source: "toolgate://worker/w1", Type: TypeCallCompleted, Subject: "c1", TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		{ID: "a1.c1:result", Source: "toolgate://worker/host name-1", Type: TypeCallCompleted, Subject: "c%1"},
		{ID: "ünïcode", Source: "toolgate://worker/w1", Type: TypeCallCompleted},
	} {
		for _, signed := range []bool{false, true} {
			if signed {
				a.Sign = sign
			}
			for _, mode := range []Mode{Binary, Structured, StructuredBare} {
				got, err := EncodeData("toolgate.result.a1.c1", a, data, mode)
				if err != nil {
					t.Fatal(err)
				}
				ev, err := New(a.ID, a.Source, a.Type, data)
				if err != nil {
					t.Fatal(err)
				}
				if a.Subject != "" {
					ev.SetSubject(a.Subject)
				}
				if a.TraceParent != "" {
					ev.SetExtension("traceparent", a.TraceParent)
				}
				if signed {
					sig, signer, _ := sign(EventSigningInput(ev))
					ev.SetExtension(ExtSignature, sig)
					ev.SetExtension(ExtSigner, signer)
				}
				want, err := Encode("toolgate.result.a1.c1", ev, mode)
				if err != nil {
					t.Fatal(err)
				}
				u, err := EncodeUnsigned("toolgate.result.a1.c1", a, data, mode)
				if err != nil {
					t.Fatal(err)
				}
				var sig, signer string
				if signed {
					sig, signer, _ = sign(u.Input())
				}
				later, err := u.Signed(sig, signer)
				if err != nil {
					t.Fatal(err)
				}
				if dec, _, err := Decode(later.Header, later.Data); err != nil || string(EventSigningInput(dec)) != string(u.Input()) {
					t.Fatalf("%+v in %v: Input %q, the message's %v", a, mode, u.Input(), err)
				}
				sameMsg(t, got, want)
				sameMsg(t, later, want)
			}
		}
	}
}

// TestEncodeDataOfACallAgreesWithNewCall: the call message an agent's
// client builds with EncodeData is the one NewCall and Encode build, in
// every mode, with and without a traceparent.
func TestEncodeDataOfACallAgreesWithNewCall(t *testing.T) {
	data := CallData{Arguments: json.RawMessage(`{"path":"a <b>.txt"}`), SessionID: "s1", TimeoutMS: 500, ParentCallID: "task-1"}
	for _, tp := range []string{"", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"} {
		for _, mode := range []Mode{Binary, Structured, StructuredBare} {
			got, err := EncodeData("toolgate.call.a1.read", Attrs{ID: "call-1", Source: AgentSource("a1"), Type: TypeCallRequested, TraceParent: tp}, data, mode)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := NewCall("call-1", "a1", data)
			if err != nil {
				t.Fatal(err)
			}
			if tp != "" {
				ev.SetExtension("traceparent", tp)
			}
			want, err := Encode("toolgate.call.a1.read", ev, mode)
			if err != nil {
				t.Fatal(err)
			}
			sameMsg(t, got, want)
		}
	}
}

// sameMsg fails unless got and want are the same message but for their
// time attribute.
func sameMsg(t *testing.T, got, want *nats.Msg) {
	t.Helper()
	gh, wh := maps.Clone(got.Header), maps.Clone(want.Header)
	gd, wd := string(got.Data), string(want.Data)
	if gh.Get("content-type") == ContentTypeJSON {
		for _, h := range []nats.Header{gh, wh} {
			if _, err := time.Parse(time.RFC3339Nano, h.Get("ce-time")); err != nil {
				t.Fatalf("ce-time: %v", err)
			}
			delete(h, "ce-time")
		}
	} else {
		gd, wd = dropTime(t, got.Data), dropTime(t, want.Data)
	}
	if got.Subject != want.Subject || !reflect.DeepEqual(gh, wh) || gd != wd {
		t.Fatalf("\n got %v %s\nwant %v %s", gh, gd, wh, wd)
	}
}

func dropTime(t *testing.T, b []byte) string {
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	delete(v, "time")
	out, _ := json.Marshal(v)
	return string(out)
}

func TestEncodeDataRefusesUnmarshallableData(t *testing.T) {
	_, err := EncodeData("s", Attrs{ID: "i", Source: "toolgate://x", Type: "t"}, func() {}, Binary)
	var ue *json.UnsupportedTypeError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "marshal t data") {
		t.Fatalf("err = %v", err)
	}
}

func BenchmarkDecodeCall(b *testing.B) {
	m := callMessage(b, "agent-1")
	for _, fast := range []bool{false, true} {
		name := map[bool]string{false: "general", true: "fast"}[fast]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decodeCall(m.Subject, m.Header, m.Data, 1<<20, fast); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEncodeResult(b *testing.B) {
	data := ResultData{CallID: "c1", Agent: "a1", Tool: "read", Status: StatusOK, Output: strings.Repeat("x", 1024)}
	a := Attrs{ID: "a1.c1:result", Source: "toolgate://worker/w1", Type: TypeCallCompleted, Subject: "c1"}
	b.Run("New+Encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ev, _ := New(a.ID, a.Source, a.Type, data)
			ev.SetSubject(a.Subject)
			if _, err := Encode("toolgate.result.a1.c1", ev, Binary); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("EncodeData", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeData("toolgate.result.a1.c1", a, data, Binary); err != nil {
				b.Fatal(err)
			}
		}
	})
}
