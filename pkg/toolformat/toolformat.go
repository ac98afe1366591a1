// Package toolformat turns a registry listing into the tool definitions
// each model API expects in its requests: OpenAI (Chat Completions),
// Anthropic (Messages), Gemini (function declarations) and MCP (tools/list).
// The same listing gives every shape, so an agent on any of these APIs sees
// the same tools with the same JSON Schemas.
package toolformat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/toolgate/toolgate/pkg/events"
)

// Format names a tool definition shape.
type Format string

// The shapes Convert produces.
const (
	OpenAI    Format = "openai"    // [{"type":"function","function":{name,description,parameters}}]
	Anthropic Format = "anthropic" // [{name,description,input_schema}]
	Gemini    Format = "gemini"    // [{"functionDeclarations":[{name,description,parametersJsonSchema}]}]
	MCP       Format = "mcp"       // [{name,description,inputSchema}] as in a tools/list result
)

// Formats lists every supported format.
var Formats = []Format{OpenAI, Anthropic, Gemini, MCP}

// ErrUnknownFormat is returned for a format Convert does not know.
var ErrUnknownFormat = errors.New("unknown tool format")

// ParseFormat returns the Format named s.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats {
		if string(f) == strings.ToLower(s) {
			return f, nil
		}
	}
	return "", fmt.Errorf("%w %q (want one of openai, anthropic, gemini, mcp)", ErrUnknownFormat, s)
}

// names are the names each API accepts for a tool, compiled on first use:
// their counted repetitions make large programs that a process not
// converting tools (a CLI command, a worker before its first listing)
// need not build at start-up.
var names = sync.OnceValue(func() map[Format]*regexp.Regexp {
	return map[Format]*regexp.Regexp{
		OpenAI:    regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`),
		Anthropic: regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`),
		Gemini:    regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$`),
		MCP:       regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,128}$`),
	}
})

// Skipped is a tool left out because the API would refuse its definition.
type Skipped struct {
	Tool   string `json:"tool"`
	Reason string `json:"reason"`
}

// Definitions are the tools in one format.
type Definitions struct {
	// Format is the shape of Tools.
	Format Format
	// Tools is the value of the API's tools field: one entry per tool
	// (for Gemini, one entry holding every function declaration).
	Tools []any
	// Skipped lists the tools the API would refuse, and why.
	Skipped []Skipped
}

// JSON is the tools field as indented JSON ([] when there are none).
func (d *Definitions) JSON() ([]byte, error) {
	tools := d.Tools
	if tools == nil {
		tools = []any{}
	}
	return json.MarshalIndent(tools, "", "  ")
}

type openAITool struct {
	Type     string         `json:"type"`
	Function openAIFunction `json:"function"`
}

type openAIFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

type anthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type geminiTool struct {
	FunctionDeclarations []geminiFunction `json:"functionDeclarations"`
}

type geminiFunction struct {
	Name                 string          `json:"name"`
	Description          string          `json:"description,omitempty"`
	ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema"`
}

type mcpTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// Convert returns list in format f, sorted by name. Aliases are not
// listed: a model needs each tool once. A tool whose name the API refuses
// or whose schema is not a JSON object schema is skipped and reported.
func Convert(list []events.ToolData, f Format) (*Definitions, error) {
	re, ok := names()[f]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownFormat, f)
	}
	sorted := append([]events.ToolData(nil), list...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	d := &Definitions{Format: f}
	var decls []geminiFunction
	seen := map[string]bool{}
	for _, t := range sorted {
		if seen[t.Name] {
			continue // several workers may list the same tool
		}
		seen[t.Name] = true
		if !re.MatchString(t.Name) {
			d.Skipped = append(d.Skipped, Skipped{Tool: t.Name, Reason: fmt.Sprintf("%s refuses the name (it must match %s)", f, re)})
			continue
		}
		schema, err := ObjectSchema(t.Parameters)
		if err != nil {
			d.Skipped = append(d.Skipped, Skipped{Tool: t.Name, Reason: err.Error()})
			continue
		}
		switch f {
		case OpenAI:
			d.Tools = append(d.Tools, openAITool{Type: "function", Function: openAIFunction{Name: t.Name, Description: t.Description, Parameters: schema}})
		case Anthropic:
			d.Tools = append(d.Tools, anthropicTool{Name: t.Name, Description: t.Description, InputSchema: schema})
		case Gemini:
			decls = append(decls, geminiFunction{Name: t.Name, Description: t.Description, ParametersJSONSchema: schema})
		case MCP:
			d.Tools = append(d.Tools, mcpTool{Name: t.Name, Description: t.Description, InputSchema: schema})
		}
	}
	if len(decls) > 0 {
		d.Tools = []any{geminiTool{FunctionDeclarations: decls}}
	}
	return d, nil
}

// ObjectSchema returns a tool's parameters schema compacted, with
// {"type":"object"} for an empty one; every API wants an object schema, so
// any other schema is an error.
func ObjectSchema(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage(`{"type":"object","properties":{}}`), nil
	}
	var s struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("parameters are not a JSON Schema object: %w", err)
	}
	if s.Type != "object" {
		return nil, fmt.Errorf("parameters schema has type %v, not \"object\"", s.Type)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, fmt.Errorf("parameters: %w", err)
	}
	return b.Bytes(), nil
}
