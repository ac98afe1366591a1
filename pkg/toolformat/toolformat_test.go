package toolformat

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/toolgate/toolgate/pkg/events"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func listing(t *testing.T) []events.ToolData {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "listing.json"))
	if err != nil {
		t.Fatal(err)
	}
	var list []events.ToolData
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	return list
}

func TestConvertGolden(t *testing.T) {
	list := listing(t)
	for _, f := range Formats {
		t.Run(string(f), func(t *testing.T) {
			d, err := Convert(list, f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := d.JSON()
			if err != nil {
				t.Fatal(err)
			}
			skipped, _ := json.MarshalIndent(d.Skipped, "", "  ")
			got = append(append(append(got, "\n// skipped\n"...), skipped...), '\n')
			path := filepath.Join("testdata", string(f)+".golden")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if string(got) != string(want) {
				t.Errorf("%s differs from the golden file; got:\n%s", path, got)
			}
		})
	}
}

func TestConvertShapes(t *testing.T) {
	list := listing(t)
	tests := []struct {
		format Format
		// name and schema of the first tool, read from the JSON shape
		name, schema func(m map[string]any) any
		count        func(tools []any) int
	}{
		{OpenAI, func(m map[string]any) any { return m["function"].(map[string]any)["name"] },
			func(m map[string]any) any { return m["function"].(map[string]any)["parameters"] },
			func(ts []any) int { return len(ts) }},
		{Anthropic, func(m map[string]any) any { return m["name"] },
			func(m map[string]any) any { return m["input_schema"] },
			func(ts []any) int { return len(ts) }},
		{Gemini, func(m map[string]any) any { return m["functionDeclarations"].([]any)[0].(map[string]any)["name"] },
			func(m map[string]any) any {
				return m["functionDeclarations"].([]any)[0].(map[string]any)["parametersJsonSchema"]
			},
			func(ts []any) int { return len(ts[0].(map[string]any)["functionDeclarations"].([]any)) }},
		{MCP, func(m map[string]any) any { return m["name"] },
			func(m map[string]any) any { return m["inputSchema"] },
			func(ts []any) int { return len(ts) }},
	}
	for _, tt := range tests {
		t.Run(string(tt.format), func(t *testing.T) {
			d, err := Convert(list, tt.format)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := d.JSON()
			var ts []any
			if err := json.Unmarshal(b, &ts); err != nil {
				t.Fatal(err)
			}
			first := ts[0].(map[string]any)
			if got := tt.name(first); got != "clarify" {
				t.Errorf("first tool = %v, want clarify (sorted)", got)
			}
			if s, ok := tt.schema(first).(map[string]any); !ok || s["type"] != "object" {
				t.Errorf("schema = %v, want an object schema", tt.schema(first))
			}
			want := len(list)
			if tt.format != Gemini && tt.format != MCP {
				want-- // ns:odd has a colon
			}
			if tt.format == MCP {
				want-- // MCP names allow no colon either
			}
			if n := tt.count(ts); n != want {
				t.Errorf("%d tools, want %d; skipped %v", n, want, d.Skipped)
			}
		})
	}
}

func TestParseFormat(t *testing.T) {
	for _, f := range Formats {
		if got, err := ParseFormat(string(f)); err != nil || got != f {
			t.Errorf("ParseFormat(%q) = %q, %v", f, got, err)
		}
	}
	if _, err := ParseFormat("cohere"); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("ParseFormat(cohere) err = %v, want ErrUnknownFormat", err)
	}
	if _, err := Convert(nil, "cohere"); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("Convert(cohere) err = %v, want ErrUnknownFormat", err)
	}
}

func TestObjectSchemaRefusesNonObjects(t *testing.T) {
	tests := []struct {
		raw string
		ok  bool
	}{
		{``, true},
		{`{"type":"object"}`, true},
		{`{"type":"string"}`, false},
		{`{"properties":{}}`, false},
		{`[1]`, false},
		{`{`, false},
	}
	for _, tt := range tests {
		_, err := ObjectSchema(json.RawMessage(tt.raw))
		if (err == nil) != tt.ok {
			t.Errorf("ObjectSchema(%q) err = %v, want ok=%v", tt.raw, err, tt.ok)
		}
	}
}
