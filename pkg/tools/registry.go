package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// ChangeKind says whether a tool was added to or removed from a registry.
type ChangeKind int

// Registry changes.
const (
	Registered ChangeKind = iota + 1
	Unregistered
)

// Change is one registry change, handed to watchers.
type Change struct {
	Kind ChangeKind
	Tool *Tool
}

type entry struct {
	tool   *Tool
	schema *jsonschema.Schema
}

// Registry holds tools by name and alias. It is safe for concurrent use.
type Registry struct {
	mu       sync.RWMutex
	byName   map[string]*entry // canonical names and aliases
	watchers []func(Change)
	override Override
}

// Override rewrites a tool as it is registered (the operator's
// configuration has the last word over every source). It returns nil to
// leave the tool out: Register then registers nothing and returns nil.
type Override func(*Tool) *Tool

// SetOverride makes o apply to every later Register.
func (r *Registry) SetOverride(o Override) {
	r.mu.Lock()
	r.override = o
	r.mu.Unlock()
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{byName: map[string]*entry{}} }

// Watch calls fn after every Register and Unregister, in order, outside the
// registry's lock.
func (r *Registry) Watch(fn func(Change)) {
	r.mu.Lock()
	r.watchers = append(r.watchers, fn)
	r.mu.Unlock()
}

// Register adds t. It fails with ErrInvalidTool for an empty or unusable
// name, a missing handler or a schema that does not compile, and with
// ErrDuplicate when the name or an alias is taken.
func (r *Registry) Register(t *Tool) error {
	r.mu.RLock()
	override := r.override
	r.mu.RUnlock()
	if override != nil {
		if t = override(t); t == nil {
			return nil
		}
	}
	if err := validName(t.Name); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidTool, err)
	}
	if t.Handler == nil {
		return fmt.Errorf("%w: tool %q has no handler", ErrInvalidTool, t.Name)
	}
	for _, a := range t.Aliases {
		if err := validName(a); err != nil {
			return fmt.Errorf("%w: alias of %q: %v", ErrInvalidTool, t.Name, err)
		}
	}
	if len(t.Parameters) == 0 {
		t.Parameters = json.RawMessage(`{"type":"object"}`)
	}
	schema, err := compileSchema(t.Name, t.Parameters)
	if err != nil {
		return fmt.Errorf("%w: %q: %v", ErrInvalidTool, t.Name, err)
	}
	e := &entry{tool: t, schema: schema}
	r.mu.Lock()
	for _, n := range append([]string{t.Name}, t.Aliases...) {
		if _, taken := r.byName[n]; taken {
			r.mu.Unlock()
			return fmt.Errorf("%w: %q", ErrDuplicate, n)
		}
	}
	for _, n := range append([]string{t.Name}, t.Aliases...) {
		r.byName[n] = e
	}
	watchers := slices.Clone(r.watchers)
	r.mu.Unlock()
	for _, w := range watchers {
		w(Change{Kind: Registered, Tool: t})
	}
	return nil
}

// MustRegister is Register for start-up code; it panics on error.
func (r *Registry) MustRegister(t *Tool) {
	if err := r.Register(t); err != nil {
		panic(err)
	}
}

// Unregister removes the tool named name (or aliased) and reports whether
// there was one.
func (r *Registry) Unregister(name string) bool {
	r.mu.Lock()
	e, ok := r.byName[name]
	if !ok {
		r.mu.Unlock()
		return false
	}
	for _, n := range append([]string{e.tool.Name}, e.tool.Aliases...) {
		delete(r.byName, n)
	}
	watchers := slices.Clone(r.watchers)
	r.mu.Unlock()
	for _, w := range watchers {
		w(Change{Kind: Unregistered, Tool: e.tool})
	}
	return true
}

// Get returns the tool named or aliased name.
func (r *Registry) Get(name string) (*Tool, bool) {
	e, ok := r.get(name)
	if !ok {
		return nil, false
	}
	return e.tool, true
}

func (r *Registry) get(name string) (*entry, bool) {
	r.mu.RLock()
	e, ok := r.byName[name]
	r.mu.RUnlock()
	return e, ok
}

// List returns the registered tools sorted by name.
func (r *Registry) List() []*Tool {
	r.mu.RLock()
	seen := map[*entry]bool{}
	var out []*Tool
	for _, e := range r.byName {
		if !seen[e] {
			seen[e] = true
			out = append(out, e.tool)
		}
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names returns the canonical names, sorted.
func (r *Registry) Names() []string {
	var names []string
	for _, t := range r.List() {
		names = append(names, t.Name)
	}
	return names
}

// ForLLM lists the tools as a model sees them: name, description, parameters.
func (r *Registry) ForLLM() []Spec {
	var out []Spec
	for _, t := range r.List() {
		out = append(out, Spec{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	return out
}

// Validate checks raw arguments against the schema of the tool named name
// and returns them decoded. Numbers decode as json.Number.
func (r *Registry) Validate(name string, raw json.RawMessage) (map[string]any, error) {
	e, ok := r.get(name)
	if !ok {
		return nil, &UnknownToolError{Name: name, Available: r.Names()}
	}
	return validate(e, raw)
}

func validate(e *entry, raw json.RawMessage) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, &ArgumentError{Tool: e.tool.Name, Fields: []FieldError{{Message: "not valid JSON: " + err.Error()}}}
	}
	if dec.More() {
		return nil, &ArgumentError{Tool: e.tool.Name, Fields: []FieldError{{Message: "trailing data after the arguments object"}}}
	}
	if err := e.schema.Validate(v); err != nil {
		return nil, &ArgumentError{Tool: e.tool.Name, Fields: fieldErrors(err)}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, &ArgumentError{Tool: e.tool.Name, Fields: []FieldError{{Message: "arguments must be a JSON object"}}}
	}
	return m, nil
}

// fieldErrors flattens a jsonschema error into the leaf failures, each with
// the instance location (the field) and the rule's message.
func fieldErrors(err error) []FieldError {
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return []FieldError{{Message: err.Error()}}
	}
	var out []FieldError
	var walk func(v *jsonschema.ValidationError)
	walk = func(v *jsonschema.ValidationError) {
		if len(v.Causes) == 0 {
			out = append(out, FieldError{Field: v.InstanceLocation, Message: v.Message})
			return
		}
		for _, c := range v.Causes {
			walk(c)
		}
	}
	walk(ve)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out
}

func compileSchema(name string, raw json.RawMessage) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	url := "toolgate:///tools/" + name + ".json"
	if err := c.AddResource(url, bytes.NewReader(raw)); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	return s, nil
}

func validName(n string) error {
	if n == "" {
		return fmt.Errorf("empty name")
	}
	if len(n) > 64 {
		return fmt.Errorf("name %q is longer than 64 bytes", n)
	}
	for _, r := range n {
		ok := r == '_' || r == '-' || r == ':' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
		if !ok {
			return fmt.Errorf("name %q: only letters, digits, '_', '-' and ':' are allowed", n)
		}
	}
	if strings.HasPrefix(n, "-") {
		return fmt.Errorf("name %q starts with '-'", n)
	}
	return nil
}
