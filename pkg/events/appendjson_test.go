package events

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// tricky are strings encoding/json escapes in every way it has: quotes,
// backslashes, control bytes, HTML, invalid UTF-8, U+2028/2029, DEL.
var tricky = []string{
	"", "plain", `q"uo\te`, "tab\tnl\nret\rbs\bff\f", "\x00\x01\x1f\x7f", "<a href=\"x\">&amp;</a>",
	"bad \xff\xfe utf8 \xc3", "line\u2028para\u2029", "ünïcødé 日本語 🎉", "\ud7ff\ue000", "%2F\\u0000",
}

// fill sets every exported field of the struct v points to (nested
// structs, pointers, slices and maps included) to a random value, so
// that a field added to a payload without its appender fails the test.
func fill(r *rand.Rand, v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if r.IntN(4) == 0 {
			return // nil
		}
		v.Set(reflect.New(v.Type().Elem()))
		fill(r, v.Elem())
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			if r.IntN(4) > 0 {
				v.Set(reflect.ValueOf(time.Unix(r.Int64N(1<<35), r.Int64N(1e9)).UTC()))
			}
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(r, v.Field(i))
			}
		}
	case reflect.String:
		v.SetString(tricky[r.IntN(len(tricky))])
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.Int, reflect.Int64:
		v.SetInt(r.Int64N(1<<40) - 1<<39)
	case reflect.Uint64:
		v.SetUint(r.Uint64N(3) * r.Uint64())
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			if r.IntN(3) == 0 {
				v.SetBytes([]byte(`{"a": [1, 2]}`))
			}
			return
		}
		n := r.IntN(4)
		if n == 0 {
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), n, n))
		for i := range n {
			fill(r, v.Index(i))
		}
	case reflect.Map:
		n := r.IntN(5)
		if n == 0 {
			return
		}
		v.Set(reflect.MakeMap(v.Type()))
		for range n {
			k := reflect.New(v.Type().Key()).Elem()
			fill(r, k)
			e := reflect.New(v.Type().Elem()).Elem()
			if e.Kind() == reflect.Interface {
				vals := []any{"s" + tricky[r.IntN(len(tricky))], r.IntN(2) == 0, r.IntN(1000), r.Int64N(1 << 50), 1.5, []string{"x"}, nil}
				e.Set(reflect.ValueOf(&vals[r.IntN(len(vals))]).Elem())
			} else {
				fill(r, e)
			}
			v.SetMapIndex(k, e)
		}
	default:
		panic("fill: no filler for " + v.Type().String())
	}
}

func TestAppendJSONMatchesMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	fast := 0
	for i := range 20000 {
		for _, v := range []any{new(ResultData), new(AuditData)} {
			fill(r, reflect.ValueOf(v).Elem())
			want, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			var ok bool
			switch d := v.(type) {
			case *ResultData:
				got, ok = appendResult(nil, d)
			case *AuditData:
				got, ok = appendAudit(nil, d)
			}
			if ok {
				fast++
				if !bytes.Equal(got, want) {
					t.Fatalf("value %d: %T\n got %s\nwant %s", i, v, got, want)
				}
			}
			m, err := marshalData(v)
			if err != nil || !bytes.Equal(m, want) {
				t.Fatalf("value %d: marshalData: %v\n got %s\nwant %s", i, err, m, want)
			}
		}
	}
	if fast < 10000 {
		t.Errorf("only %d of 40000 values took the fast path", fast)
	}
}

func TestMarshalDataCases(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 1500, time.UTC)
	for _, tc := range []struct {
		name string
		v    any
		fast bool
	}{
		{"result value", ResultData{CallID: "c", Status: StatusOK, Output: "x", Metadata: map[string]any{"size": 3, "path": "a<b"}}, true},
		{"empty result", &ResultData{}, true},
		{"nil result", (*ResultData)(nil), false},
		{"float metadata", &ResultData{Metadata: map[string]any{"f": 0.1}}, false},
		{"nested metadata", &ResultData{Metadata: map[string]any{"m": map[string]any{"a": 1}}}, false},
		{"audit value", AuditData{CallID: "c", Time: at, Judged: &Judged{Links: map[string]string{"b": "1", "a": "2"}}}, true},
		{"zero time", &AuditData{}, true},
		{"local time", &AuditData{Time: at.In(time.FixedZone("x", 3600))}, false},
		{"year 10000", &AuditData{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, false},
		{"edited arguments", &AuditData{Approval: &ApprovalAudit{EditedArguments: json.RawMessage(`{ "a" : 1 }`)}}, false},
		{"other type", ViolationData{CallID: "c"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, werr := json.Marshal(tc.v)
			got, err := marshalData(tc.v)
			if (err != nil) != (werr != nil) || !bytes.Equal(got, want) {
				t.Fatalf("got %s, %v; want %s, %v", got, err, want, werr)
			}
			var ok bool
			switch d := tc.v.(type) {
			case ResultData:
				_, ok = appendResult(nil, &d)
			case *ResultData:
				ok = d != nil && func() bool { _, ok := appendResult(nil, d); return ok }()
			case AuditData:
				_, ok = appendAudit(nil, &d)
			case *AuditData:
				_, ok = appendAudit(nil, d)
			}
			if ok != tc.fast {
				t.Errorf("fast path taken: %v, want %v", ok, tc.fast)
			}
		})
	}
}

func FuzzAppendJSON(f *testing.F) {
	for _, s := range tricky {
		f.Add(s, s, int64(len(s)))
	}
	f.Fuzz(func(t *testing.T, a, b string, n int64) {
		res := &ResultData{CallID: a, Agent: b, Tool: a + b, Output: b + a, DurationMS: n,
			Metadata: map[string]any{a: b, b: n, "x" + a: n%2 == 0}, Decision: &Decision{Action: a, Approvers: []string{b}},
			Hooks: []HookChange{{Hook: a, Note: b}}}
		aud := &AuditData{Kind: a, CallID: b, Seq: uint64(n), Time: time.Unix(n%(1<<34), n%1e9).UTC(),
			Judged: &Judged{Path: a, Links: map[string]string{a: b, b: a}, Hosts: []string{a, b}}, Confinement: &Confinement{Write: b}}
		for _, v := range []any{res, aud} {
			want, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			got, err := marshalData(v)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("got %s, %v; want %s", got, err, want)
			}
		}
	})
}

func BenchmarkMarshalResult(b *testing.B) {
	out := bytes.Repeat([]byte("     1\t0123456789abcde\n"), 64)
	res := ResultData{CallID: "call-0123456789", Agent: "bench", Tool: "read", Status: StatusOK, Output: string(out),
		Metadata: map[string]any{"path": "data.txt", "size": 1024, "total_lines": 64, "start_line": int64(1), "end_line": int64(64)},
		Decision: &Decision{Action: "allow", Rule: "builtin:read", Revision: "abc"}, DurationMS: 1}
	aud := AuditData{Kind: AuditExecution, CallID: res.CallID, Agent: "bench", Tool: "read", Status: StatusOK, Decision: res.Decision,
		ArgsSHA256: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", OutputBytes: len(out), Worker: "w1",
		Time: time.Now().UTC(), DecidedBy: []string{"policy"}, DecidedAt: time.Now().UTC(),
		ResultSHA256: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		Judged:       &Judged{Workspace: "/ws", Path: "data.txt"}, Chain: "w1-abc", Seq: 12, Prev: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	for _, m := range []struct {
		name string
		f    func(any) ([]byte, error)
	}{{"json.Marshal", json.Marshal}, {"marshalData", marshalData}} {
		b.Run(m.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := m.f(res); err != nil {
					b.Fatal(err)
				}
				if _, err := m.f(&aud); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
