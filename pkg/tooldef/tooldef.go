// Package tooldef is the one definition of each built-in tool: its name,
// aliases, kind, arguments, and what each argument stands for (a path it
// reads or writes, a command it runs, text it writes). Everything else that
// knows a built-in tool is made from it: the tools' JSON Schemas
// (pkg/tools/builtin, pkg/tools/bash), the gate's judgement of paths and
// commands (pkg/policy), the approver's display, the hook mapping
// (internal/hookgate), the diffs shown to people (pkg/approval) and the
// tool reference docs/TOOLS.md.
//
// It imports nothing of toolgate, so pkg/policy and pkg/tools can both
// import it.
package tooldef

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Kinds of tools, as the policy names them (policy.Kind has the same
// values).
const (
	KindRead    = "read"
	KindWrite   = "write"
	KindSearch  = "search"
	KindExecute = "execute"
	KindNetwork = "network"
	KindOther   = "other"
)

// Type is the JSON type of an argument.
type Type string

// Argument types.
const (
	String  Type = "string"
	Integer Type = "integer"
	Boolean Type = "boolean"
	Array   Type = "array"
)

// Role is what an argument stands for, beyond being an option of the tool.
type Role string

// Roles of arguments. The zero Role is an option: it changes how the tool
// works, not what it touches.
const (
	// Path is a file or directory the tool touches, relative to the
	// workspace or absolute; the gate judges it by the path rules.
	Path Role = "path"
	// PathPattern is a glob of paths under the Path argument; the gate
	// judges the directory it starts from.
	PathPattern Role = "path_pattern"
	// Pattern is what the tool searches file contents for.
	Pattern Role = "pattern"
	// Command is a shell command line the tool runs; the gate judges it on
	// its syntax tree.
	Command Role = "command"
	// Workdir is the directory a command runs in.
	Workdir Role = "workdir"
	// Content is the whole new content of the Path argument.
	Content Role = "content"
	// OldText is the text of the Path argument an edit replaces.
	OldText Role = "old_text"
	// NewText is the text an edit puts in place of OldText.
	NewText Role = "new_text"
	// URL is an http or https URL the tool reaches; the gate judges its
	// host and port by the policy's network allowlist.
	URL Role = "url"
	// Query is what a search tool asks a search service.
	Query Role = "query"
)

// Access is what a tool does to a path.
type Access string

// Accesses.
const (
	Reads  Access = "read"
	Writes Access = "write"
)

// Target is what a path argument names.
type Target string

// Targets.
const (
	// File is one regular file, read or written whole.
	File Target = "file"
	// Dir is a directory whose entries are listed.
	Dir Target = "dir"
	// Tree is a file or a directory searched recursively.
	Tree Target = "tree"
)

// Arg is one argument of a tool.
type Arg struct {
	// Name is the argument's name in the arguments object.
	Name string
	// Type is its JSON type.
	Type Type
	// Required arguments must be present.
	Required bool
	// Doc tells a model (and docs/TOOLS.md) what it is.
	Doc string
	// Role is what it stands for; the zero Role is an option.
	Role Role
	// Access, for a Path, is whether the tool reads or writes it.
	Access Access
	// Target, for a Path, is what it names.
	Target Target
	// Default, for an optional Path or Workdir, is what its absence means.
	Default string
	// Schema holds further JSON Schema keywords of the argument
	// (minimum, maximum, pattern, ...).
	Schema map[string]any
}

// Def is the definition of one built-in tool.
type Def struct {
	// Name is the tool's name: the <tool> token of call subjects and the
	// key of its rules in a policy.
	Name string
	// Aliases are other names that call it and that a policy may use for
	// it.
	Aliases []string
	// Kind is its kind for policies (KindRead, ...).
	Kind string
	// Pure says that running it changes nothing outside its result (it
	// only reads): a worker runs its allowed calls without a claim
	// record (tools.Tool.Pure).
	Pure bool
	// Args are its arguments, in the order the docs list them.
	Args []Arg
}

// Names returns the tool's name followed by its aliases.
func (d *Def) Names() []string { return append([]string{d.Name}, d.Aliases...) }

// Arg returns the first argument with role r, or nil.
func (d *Def) Arg(r Role) *Arg {
	for i := range d.Args {
		if d.Args[i].Role == r {
			return &d.Args[i]
		}
	}
	return nil
}

// ArgNamed returns the argument called name, or nil.
func (d *Def) ArgNamed(name string) *Arg {
	for i := range d.Args {
		if d.Args[i].Name == name {
			return &d.Args[i]
		}
	}
	return nil
}

// Required returns the names of the required arguments, in order.
func (d *Def) Required() []string {
	var out []string
	for _, a := range d.Args {
		if a.Required {
			out = append(out, a.Name)
		}
	}
	return out
}

// Schema returns the JSON Schema of the tool's arguments object: each
// argument's type, Doc as its description, and its Schema keywords.
// extra adds keywords known only at run time (an enum) by argument name;
// a name that is not an argument is an error.
func (d *Def) Schema(extra map[string]map[string]any) (json.RawMessage, error) {
	props := make(map[string]any, len(d.Args))
	for _, a := range d.Args {
		p := map[string]any{"type": string(a.Type), "description": a.Doc}
		for k, v := range a.Schema {
			p[k] = v
		}
		props[a.Name] = p
	}
	for name, kw := range extra {
		p, ok := props[name].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("tool %s: schema keywords for %q, which is not one of its arguments", d.Name, name)
		}
		for k, v := range kw {
			p[k] = v
		}
	}
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if req := d.Required(); len(req) > 0 {
		s["required"] = req
	}
	return json.Marshal(s)
}

// MustSchema is Schema for definitions fixed in the program; it panics on
// an error, which only a wrong definition causes.
func (d *Def) MustSchema(extra map[string]map[string]any) json.RawMessage {
	s, err := d.Schema(extra)
	if err != nil {
		panic(err)
	}
	return s
}

// All returns every built-in tool's definition, sorted by name.
func All() []*Def {
	out := slices.Clone(all)
	slices.SortFunc(out, func(a, b *Def) int { return strings.Compare(a.Name, b.Name) })
	return out
}

var byName = func() map[string]*Def {
	m := map[string]*Def{}
	for _, d := range all {
		for _, n := range d.Names() {
			if _, dup := m[n]; dup {
				panic("tooldef: two tools are called " + n)
			}
			m[n] = d
		}
	}
	return m
}()

// Lookup returns the definition of the built-in tool called name (its
// name or an alias).
func Lookup(name string) (*Def, bool) {
	d, ok := byName[name]
	return d, ok
}

// Canonical returns the name of the built-in tool name stands for
// (run_shell and exec → bash, read_file → read, ...), or name itself.
func Canonical(name string) string {
	if d, ok := byName[name]; ok {
		return d.Name
	}
	return name
}

// WithPath returns the names of the tools whose Path argument has the
// given access (and target, unless target is empty), sorted.
func WithPath(access Access, target Target) []string {
	var out []string
	for _, d := range All() {
		if a := d.Arg(Path); a != nil && a.Access == access && (target == "" || a.Target == target) {
			out = append(out, d.Name)
		}
	}
	return out
}
