package approval

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestCanonical(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty is the empty object", "", "{}"},
		{"blank is the empty object", " \n\t", "{}"},
		{"sorted keys", `{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{"whitespace dropped", "{ \"a\" : [ 1 , 2 ] ,\n \"b\" : { } }", `{"a":[1,2],"b":{}}`},
		{"nested sorted", `{"z":{"y":1,"x":[{"b":1,"a":0}]}}`, `{"z":{"x":[{"a":0,"b":1}],"y":1}}`},
		{"numbers as written", `{"a":1.0,"b":1e3,"c":-0,"d":10000000000000000000001}`, `{"a":1.0,"b":1e3,"c":-0,"d":10000000000000000000001}`},
		{"escapes normalised", `{"\u0061":"\u00e9\/<>&"}`, `{"a":"é/<>&"}`},
		{"control characters escaped", `{"a":"x\ty\u0001"}`, `{"a":"x\ty\u0001"}`},
		{"literals", `[true,false,null]`, `[true,false,null]`},
		{"scalar", `"s"`, `"s"`},
		{"keys sorted by bytes", `{"é":1,"z":2,"A":3}`, `{"A":3,"z":2,"é":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Canonical([]byte(tt.in))
			if err != nil {
				t.Fatalf("Canonical(%q): %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Fatalf("Canonical(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestCanonicalRefuses(t *testing.T) {
	tests := []struct {
		name, in, where string
	}{
		{"duplicate key", `{"a":1,"a":2}`, `key "a" appears twice`},
		{"nested duplicate", `{"x":[{"k":1,"k":1}]}`, `$.x[0]`},
		{"trailing data", `{} {}`, "trailing data"},
		{"not json", `{"a":}`, "at $.a"},
		{"unterminated", `{"a":[1,2`, "at $.a"},
		{"too deep", strings.Repeat("[", 600) + strings.Repeat("]", 600), "nested deeper"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Canonical([]byte(tt.in))
			if !errors.Is(err, ErrNotCanonicalizable) {
				t.Fatalf("err = %v, want ErrNotCanonicalizable", err)
			}
			if !strings.Contains(err.Error(), tt.where) {
				t.Fatalf("err = %q, want it to say %q", err, tt.where)
			}
		})
	}
}

func TestArgsHash(t *testing.T) {
	base := ArgsHash("agent-1", "bash", json.RawMessage(`{"command":"rm -rf build","timeout":30}`))
	if len(base) != 64 {
		t.Fatalf("hash %q is not 64 hex digits", base)
	}
	tests := []struct {
		name        string
		agent, tool string
		args        string
		same        bool
	}{
		{"same call reformatted", "agent-1", "bash", "{ \"timeout\": 30,\n \"command\": \"rm -rf build\" }", true},
		{"other agent", "agent-2", "bash", `{"command":"rm -rf build","timeout":30}`, false},
		{"other tool", "agent-1", "sh", `{"command":"rm -rf build","timeout":30}`, false},
		{"other argument", "agent-1", "bash", `{"command":"rm -rf /","timeout":30}`, false},
		{"number written differently", "agent-1", "bash", `{"command":"rm -rf build","timeout":30.0}`, false},
		{"extra argument", "agent-1", "bash", `{"command":"rm -rf build","timeout":30,"cwd":"/"}`, false},
		{"duplicate key is not the same call", "agent-1", "bash", `{"command":"ls","command":"rm -rf build","timeout":30}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ArgsHash(tt.agent, tt.tool, json.RawMessage(tt.args))
			if (got == base) != tt.same {
				t.Fatalf("ArgsHash same=%v, want same=%v", got == base, tt.same)
			}
		})
	}
	// Agent and tool are JSON strings, so no concatenation trick collides.
	if ArgsHash("a", "bc", nil) == ArgsHash("ab", "c", nil) {
		t.Fatal("agent/tool boundary is ambiguous")
	}
}

func TestArgsHashKnownValue(t *testing.T) {
	// sha256 of {"agent":"a","arguments":{"x":1},"tool":"t"}, computed with
	// printf '%s' '{"agent":"a","arguments":{"x":1},"tool":"t"}' | sha256sum
	const want = "98b87b94beb37d6c6ce4a03609f856f2ca23212b13bd0f64370682c6d450b18b"
	if got := ArgsHash("a", "t", json.RawMessage(`{ "x" : 1 }`)); got != want {
		t.Fatalf("ArgsHash = %s, want %s", got, want)
	}
}

func FuzzCanonical(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,{"b":null}]}`, `{"a":1,"a":2}`, `[`, `"\ud800"`, `1e400`, `{"é":"\u2028"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Canonical(in)
		if err != nil {
			if !errors.Is(err, ErrNotCanonicalizable) {
				t.Fatalf("error %v is not ErrNotCanonicalizable", err)
			}
			return
		}
		// Canonical output is valid JSON and a fixed point.
		if !json.Valid(out) {
			t.Fatalf("Canonical(%q) = %q is not valid JSON", in, out)
		}
		again, err := Canonical(out)
		if err != nil || string(again) != string(out) {
			t.Fatalf("not a fixed point: %q -> %q (%v)", out, again, err)
		}
	})
}

// TestCanonicalPlainTakesTheUsualArguments: the one-pass path serves
// arguments as agents send them (any spacing, any key order) and leaves
// what needs re-escaping or has no canonical form to the tokenizer.
func TestCanonicalPlainTakesTheUsualArguments(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" when the one-pass path must decline
	}{
		{`{"path":"notes.txt"}`, `{"path":"notes.txt"}`},
		{`{"path": "a.go", "offset": 10, "limit": 2e3}`, `{"limit":2e3,"offset":10,"path":"a.go"}`},
		{"{\n  \"command\": \"ls -la\",\n  \"timeout_ms\": 1000\n}", `{"command":"ls -la","timeout_ms":1000}`},
		{`{"b":[{"d":null,"c":true}],"a":{"z":-0.5,"y":"é😀<&>"}}`, `{"a":{"y":"é😀<&>","z":-0.5},"b":[{"c":true,"d":null}]}`},
		{`{"k":1,"j":2,"i":3,"h":4,"g":5,"f":6,"e":7,"d":8,"c":9,"b":10,"a":11}`, `{"a":11,"b":10,"c":9,"d":8,"e":7,"f":6,"g":5,"h":4,"i":3,"j":2,"k":1}`},
		{`[]`, `[]`},
		{`{"a":"x\ny"}`, ""},             // an escape
		{`{"a":"` + "\u2028" + `"}`, ""}, // written escaped
		{"{\"a\":\"\xff\"}", ""},         // invalid UTF-8
		{`{"a":1,"a":1}`, ""},            // repeated key
		{`{"a":01}`, ""},
		{`{"a":1.}`, ""},
		{`{"a":-}`, ""},
		{`[1,]`, ""},
		{`{"a":1,}`, ""},
		{`{"a" 1}`, ""},
		{`tru`, ""},
		{`{} x`, ""},
	}
	for _, tt := range tests {
		got, ok := canonicalPlain([]byte(tt.in))
		if ok != (tt.want != "") || string(got) != tt.want {
			t.Errorf("canonicalPlain(%q) = %q, %v; want %q", tt.in, got, ok, tt.want)
		}
	}
}

// FuzzCanonicalPlain: whatever the one-pass path accepts, the tokenizer
// accepts too, with the same canonical form.
func FuzzCanonicalPlain(f *testing.F) {
	for _, s := range []string{`{"path":"notes.txt"}`, `{"b":1, "a":[2,{"d":3,"c":4}]}`, `{"a":1,"a":2}`, `{"a":-0.0e+1}`, `[1,2`, `{"é":"ü","e":""}`, `0`, `-`, `"\u2028"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		plain, ok := canonicalPlain(in)
		if !ok {
			return
		}
		decoded, err := canonicalDecoded(in)
		if err != nil {
			t.Fatalf("one-pass accepts %q as %q; the tokenizer refuses it: %v", in, plain, err)
		}
		if string(plain) != string(decoded) {
			t.Fatalf("canonical form of %q: one-pass %q, tokenizer %q", in, plain, decoded)
		}
	})
}

// FuzzWriteString: a string is written as encoding/json writes it without
// HTML escaping, whether or not it takes the plain path.
func FuzzWriteString(f *testing.F) {
	for _, s := range []string{"", "agent-1", "a\"b", "\\", "\u2028", "é\xff", "\ufffd", "<&>", "\x7f\x01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var b bytes.Buffer
		writeString(&b, s)
		var want strings.Builder
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s)
		if b.String() != strings.TrimSuffix(want.String(), "\n") {
			t.Fatalf("writeString(%q) = %s, want %s", s, b.String(), want.String())
		}
	})
}
