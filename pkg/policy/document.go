package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// ErrInvalid is wrapped by every *ParseError: the policy document was
// rejected as a whole.
var ErrInvalid = errors.New("invalid policy")

// Problem is one thing wrong in a policy document.
type Problem struct {
	// Line and Column locate the problem (1-based; 0 when unknown).
	Line   int `json:"line"`
	Column int `json:"column,omitempty"`
	// Field is the dotted path of the field, e.g. tools.run_shell.whitelist[2].
	Field string `json:"field,omitempty"`
	// Message says what is wrong.
	Message string `json:"message"`
}

// String returns the Problem as written in documents and logs.
func (p Problem) String() string {
	loc := fmt.Sprintf("line %d", p.Line)
	if p.Field != "" {
		return loc + ": " + p.Field + ": " + p.Message
	}
	return loc + ": " + p.Message
}

// ParseError lists every problem of a rejected document.
type ParseError struct {
	// Source names the document (a file name, a KV key).
	Source   string
	Problems []Problem
}

// Error says what is wrong, for a person.
func (e *ParseError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "invalid policy %s: %d problem(s)", e.Source, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(e.Source)
		b.WriteString(":")
		b.WriteString(p.String())
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *ParseError) Unwrap() error { return ErrInvalid }

// Warning is something in a valid document that is probably not what its
// author meant, such as a rule that can never match.
type Warning struct {
	Line    int    `json:"line"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// String returns the Warning as written in documents and logs.
func (w Warning) String() string {
	return Problem{Line: w.Line, Field: w.Field, Message: w.Message}.String()
}

// Security is the exec security mode (seed 001).
type Security int

// Exec security modes; the zero value means unset.
const (
	securityUnset Security = iota
	SecurityFull
	SecurityAllowlist
	SecurityDeny
)

// String returns the Security as written in documents and logs.
func (s Security) String() string {
	switch s {
	case SecurityFull:
		return "full"
	case SecurityAllowlist:
		return "allowlist"
	case SecurityDeny:
		return "deny"
	}
	return ""
}

// AskMode says when a person is asked (seed 001).
type AskMode int

// Ask modes; the zero value means unset (on_miss).
const (
	askUnset AskMode = iota
	AskOff
	AskOnMiss
	AskAlways
)

// String returns the AskMode as written in documents and logs.
func (a AskMode) String() string {
	switch a {
	case AskOff:
		return "off"
	case AskAlways:
		return "always"
	}
	return "on_miss"
}

// compiled document ------------------------------------------------------

type verdict struct {
	action Action
	id     string
}

type listEntry struct {
	id   string
	tool string // canonical name, when not a glob or a kind
	glob string // tool-name glob
	kind Kind   // kind:NAME
	line int
}

type tokenPattern struct {
	id     string
	raw    string
	tokens []string
	line   int
}

type pathEntry struct {
	id   string
	raw  string
	line int
}

type constraints struct {
	maxSize    int64
	maxSizeID  string
	maxResults int
	allowed    []pathEntry
	denied     []*pathGlob
}

type execConfig struct {
	security           Security
	securityID         string
	ask                AskMode
	askID              string
	safeBins           []pathEntry // raw is the binary name
	confirmDangerous   *bool
	neutralBuiltins    *bool
	neutralID          string
	confirmID          string
	dangerousWhitelist []tokenPattern
	allowedDirs        []pathEntry
	whitelist          []tokenPattern
	blacklist          []tokenPattern
	set                bool // any field given
}

type toolRule struct {
	name            string // as written
	id              string // tools.run_shell
	line            int
	action          *verdict
	timeout         time.Duration
	approvers       int
	approvalTimeout time.Duration
	constraints     constraints
	whitelist       []tokenPattern
	blacklist       []tokenPattern
	exec            execConfig
}

type layer struct {
	prefix      string // "" or agents.<glob>.
	def         *verdict
	enabled     *verdict // enabled: false → deny everything
	lists       [3][]listEntry
	tools       map[string][]*toolRule
	kinds       map[Kind]*toolRule
	exec        execConfig
	constraints constraints
	network     network
}

type overlay struct {
	pattern string
	line    int
	layer   *layer
}

// Policy is a parsed, validated policy document. It is immutable and safe
// for concurrent use.
type Policy struct {
	source   string
	revision string
	home     string
	base     *layer
	agents   []*overlay
	budgets  []Budget
	examples []Example
}

// Revision is a short sha256 of the document's bytes: it names the policy
// in decisions and events.
func (p *Policy) Revision() string { return p.revision }

// Source names where the document came from.
func (p *Policy) Source() string { return p.source }

// Load reads and parses the policy document at path.
func Load(path string) (*Policy, []Warning, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("load policy: %w", err)
	}
	return Parse(data, path)
}

// yamlLine finds the line number in the YAML decoder's errors.
var yamlLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`line (\d+)`) })

// Parse parses a policy document (YAML, or JSON). An invalid document is
// rejected whole with a *ParseError that lists every problem with its line
// and field; warnings report rules that can never match.
func Parse(data []byte, source string) (*Policy, []Warning, error) {
	return parse(data, source, true)
}

// ParseExamples parses a document as Parse does and judges its examples,
// returning how each came out: the error is set only for problems of the
// document itself, not for failing examples (which Parse rejects).
func ParseExamples(data []byte, source string) (*Policy, []ExampleResult, []Warning, error) {
	p, warns, err := parse(data, source, false)
	if err != nil {
		return nil, nil, nil, err
	}
	return p, p.RunExamples(), warns, nil
}

func parse(data []byte, source string, check bool) (*Policy, []Warning, error) {
	if source == "" {
		source = "policy"
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		line := 0
		if m := yamlLine().FindStringSubmatch(err.Error()); m != nil {
			line, _ = strconv.Atoi(m[1])
		}
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		msg = strings.TrimPrefix(msg, fmt.Sprintf("line %d: ", line))
		return nil, nil, &ParseError{Source: source, Problems: []Problem{{Line: line, Message: "not valid YAML or JSON: " + msg}}}
	}
	home, _ := os.UserHomeDir()
	d := &decoder{home: home}
	p := &Policy{source: source, home: home}
	sum := sha256.Sum256(data)
	p.revision = hex.EncodeToString(sum[:6])
	p.base = newLayer("")
	if len(root.Content) > 0 {
		doc := deref(root.Content[0])
		switch {
		case doc.Kind == yaml.ScalarNode && doc.Tag == "!!null":
		case doc.Kind != yaml.MappingNode:
			d.errf(doc, "", "the document must be a mapping (tools:, allow:, exec:, ...), not %s", kindName(doc))
		default:
			d.top(doc, p)
		}
	}
	if len(d.problems) == 0 && check {
		d.checkExamples(p)
	}
	if len(d.problems) > 0 {
		sort.SliceStable(d.problems, func(i, j int) bool { return d.problems[i].Line < d.problems[j].Line })
		return nil, nil, &ParseError{Source: source, Problems: d.problems}
	}
	d.lint(p)
	sort.SliceStable(d.warnings, func(i, j int) bool { return d.warnings[i].Line < d.warnings[j].Line })
	return p, d.warnings, nil
}

func newLayer(prefix string) *layer {
	return &layer{prefix: prefix, tools: map[string][]*toolRule{}, kinds: map[Kind]*toolRule{}}
}

type decoder struct {
	home     string
	problems []Problem
	warnings []Warning
}

func (d *decoder) errf(n *yaml.Node, field, format string, args ...any) {
	p := Problem{Field: field, Message: fmt.Sprintf(format, args...)}
	if n != nil {
		p.Line, p.Column = n.Line, n.Column
	}
	d.problems = append(d.problems, p)
}

func (d *decoder) warnf(line int, field, format string, args ...any) {
	d.warnings = append(d.warnings, Warning{Line: line, Field: field, Message: fmt.Sprintf(format, args...)})
}

func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 16; i++ {
		n = n.Alias
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "empty"
		}
		return fmt.Sprintf("the value %q", n.Value)
	}
	return "an unsupported node"
}

// normKey turns camelCase and kebab-case keys into snake_case.
func normKey(k string) string {
	var b strings.Builder
	for i, r := range k {
		switch {
		case r == '-':
			b.WriteByte('_')
		case unicode.IsUpper(r):
			if i > 0 {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

type field struct {
	key   string // normalized
	raw   string
	kn    *yaml.Node
	value *yaml.Node
}

// fields lists a mapping's entries, reporting duplicate keys.
func (d *decoder) fields(n *yaml.Node, at string) []field {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		d.errf(n, at, "must be a mapping, not %s", kindName(n))
		return nil
	}
	seen := map[string]int{}
	var out []field
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := deref(n.Content[i]), deref(n.Content[i+1])
		if kn.Kind != yaml.ScalarNode {
			d.errf(kn, at, "keys must be plain strings")
			continue
		}
		if kn.Value == "<<" {
			d.errf(kn, at, "merge keys (<<) are not supported")
			continue
		}
		key := normKey(kn.Value)
		if prev, dup := seen[key]; dup {
			d.errf(kn, join(at, kn.Value), "defined twice (first at line %d)", prev)
			continue
		}
		seen[key] = kn.Line
		out = append(out, field{key: key, raw: kn.Value, kn: kn, value: vn})
	}
	return out
}

func join(at, key string) string {
	if at == "" {
		return key
	}
	return at + "." + key
}

func (d *decoder) str(n *yaml.Node, at string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.errf(n, at, "must be a string, not %s", kindName(n))
		return "", false
	}
	return n.Value, true
}

func (d *decoder) boolean(n *yaml.Node, at string) (bool, bool) {
	if n.Kind == yaml.ScalarNode {
		switch strings.ToLower(n.Value) {
		case "true", "yes", "on":
			return true, true
		case "false", "no", "off":
			return false, true
		}
	}
	d.errf(n, at, "must be true or false, not %s", kindName(n))
	return false, false
}

func (d *decoder) integer(n *yaml.Node, at string, min int) (int, bool) {
	if n.Kind == yaml.ScalarNode {
		if v, err := strconv.Atoi(n.Value); err == nil {
			if v < min {
				d.errf(n, at, "must be at least %d, not %d", min, v)
				return 0, false
			}
			return v, true
		}
	}
	d.errf(n, at, "must be a whole number, not %s", kindName(n))
	return 0, false
}

func (d *decoder) duration(n *yaml.Node, at string) (time.Duration, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag != "!!null" {
		if secs, err := strconv.Atoi(n.Value); err == nil && secs >= 0 {
			return time.Duration(secs) * time.Second, true
		}
		if v, err := time.ParseDuration(n.Value); err == nil && v > 0 {
			return v, true
		}
	}
	d.errf(n, at, "must be a positive duration such as 30s or 10m, not %s", kindName(n))
	return 0, false
}

var sizeUnits = map[string]int64{"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
	"mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}

func (d *decoder) size(n *yaml.Node, at string) (int64, bool) {
	if n.Kind == yaml.ScalarNode {
		s := strings.TrimSpace(strings.ToLower(n.Value))
		i := 0
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		num, unit := s[:i], strings.TrimSpace(s[i:])
		if f, err := strconv.ParseFloat(num, 64); err == nil && f > 0 {
			if mul, ok := sizeUnits[unit]; ok {
				return int64(f * float64(mul)), true
			}
		}
	}
	d.errf(n, at, "must be a size such as 10MB or 512KB, not %s", kindName(n))
	return 0, false
}

func (d *decoder) action(n *yaml.Node, at string) (Action, bool) {
	if n.Kind == yaml.ScalarNode {
		switch a := Action(strings.ToLower(n.Value)); a {
		case Allow, Ask, Deny:
			return a, true
		}
	}
	d.errf(n, at, "must be allow, ask or deny, not %s", kindName(n))
	return "", false
}

func (d *decoder) strings(n *yaml.Node, at string) []*yaml.Node {
	n = deref(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.errf(n, at, "must be a list, not %s", kindName(n))
		return nil
	}
	out := make([]*yaml.Node, 0, len(n.Content))
	for i, c := range n.Content {
		c = deref(c)
		if c.Kind != yaml.ScalarNode || c.Tag == "!!null" || strings.TrimSpace(c.Value) == "" {
			d.errf(c, fmt.Sprintf("%s[%d]", at, i), "must be a non-empty string, not %s", kindName(c))
			continue
		}
		out = append(out, c)
	}
	return out
}

// top decodes the document's top level.
func (d *decoder) top(n *yaml.Node, p *Policy) {
	for _, f := range d.fields(n, "") {
		switch f.key {
		case "version":
			if v, ok := d.integer(f.value, f.raw, 1); ok && v != 1 {
				d.errf(f.value, f.raw, "unsupported version %d (this build reads version 1)", v)
			}
		case "description", "name":
			d.str(f.value, f.raw)
		case "agents":
			d.agents(f.value, p)
		case "budgets":
			d.budgets(f.value, p)
		case "examples":
			d.examples(f.value, f.raw, "", p)
		default:
			if !d.layerField(f, p.base, "") {
				d.errf(f.kn, f.raw, "unknown field (expected version, default, enabled, allow, deny, ask, exec, tools, kinds, constraints, network, agents, budgets or examples)")
			}
		}
	}
}

// layerField decodes a field valid both at the top level and in an agent
// overlay; it reports whether the key was one.
func (d *decoder) layerField(f field, l *layer, at string) bool {
	name := join(at, f.raw)
	switch f.key {
	case "default":
		if a, ok := d.action(f.value, name); ok {
			l.def = &verdict{action: a, id: l.prefix + "default"}
		}
	case "enabled", "enable_tool_calls":
		if v, ok := d.boolean(f.value, name); ok && !v {
			l.enabled = &verdict{action: Deny, id: l.prefix + f.raw}
		}
	case "allow", "ask", "deny":
		d.list(f, l, name)
	case "exec":
		d.exec(f.value, &l.exec, name, l.prefix+f.raw)
	case "tools":
		d.tools(f.value, l, name)
	case "kinds":
		d.kinds(f.value, l, name)
	case "constraints":
		d.constraints(f.value, &l.constraints, name, l.prefix+f.raw)
	case "network":
		d.network(f.value, l, name, l.prefix+f.raw)
	default:
		return false
	}
	return true
}

var listIndex = map[string]int{"allow": 0, "ask": 1, "deny": 2}

func (d *decoder) list(f field, l *layer, name string) {
	idx := listIndex[f.key]
	for i, c := range d.strings(f.value, name) {
		e := listEntry{id: fmt.Sprintf("%s[%d]", name, i), line: c.Line}
		v := strings.TrimSpace(c.Value)
		switch {
		case strings.HasPrefix(v, "kind:"):
			k := Kind(strings.TrimPrefix(v, "kind:"))
			if !validKinds[k] {
				d.errf(c, fmt.Sprintf("%s[%d]", name, i), "unknown kind %q (expected read, write, execute, search, network or other)", k)
				continue
			}
			e.kind = k
		case strings.ContainsAny(v, "*?["):
			if _, err := path.Match(v, ""); err != nil {
				d.errf(c, fmt.Sprintf("%s[%d]", name, i), "bad tool-name pattern %q: %v", v, err)
				continue
			}
			e.glob = v
		default:
			e.tool = CanonicalTool(v)
		}
		l.lists[idx] = append(l.lists[idx], e)
	}
}

func (d *decoder) tools(n *yaml.Node, l *layer, at string) {
	for _, f := range d.fields(n, at) {
		name := join(at, f.raw)
		switch {
		case f.key == "default":
			if a, ok := d.action(f.value, name); ok {
				l.def = &verdict{action: a, id: l.prefix + "tools.default"}
			}
			continue
		case (f.key == "allow" || f.key == "deny" || f.key == "ask") && f.value.Kind == yaml.SequenceNode:
			// seed 001's ToolsConfig written under tools:
			d.list(f, l, name)
			continue
		}
		tool := strings.TrimSpace(f.raw)
		if tool == "" || strings.ContainsAny(tool, " \t\n") {
			d.errf(f.kn, name, "tool names cannot be empty or contain spaces")
			continue
		}
		canon := CanonicalTool(tool)
		r := d.rule(f.value, name, l.prefix+"tools."+tool, isShellTool(canon))
		if r == nil {
			continue
		}
		r.name, r.line = tool, f.kn.Line
		l.tools[canon] = append(l.tools[canon], r)
	}
}

func (d *decoder) kinds(n *yaml.Node, l *layer, at string) {
	for _, f := range d.fields(n, at) {
		name := join(at, f.raw)
		k := Kind(f.raw)
		if !validKinds[k] {
			d.errf(f.kn, name, "unknown kind %q (expected read, write, execute, search, network or other)", f.raw)
			continue
		}
		r := d.rule(f.value, name, l.prefix+"kinds."+f.raw, false)
		if r == nil {
			continue
		}
		r.name, r.line = f.raw, f.kn.Line
		l.kinds[k] = r
	}
}

// rule decodes a tool or kind rule: a bare action, or a mapping.
func (d *decoder) rule(n *yaml.Node, at, id string, shell bool) *toolRule {
	r := &toolRule{id: id}
	if n.Kind == yaml.ScalarNode {
		if n.Tag == "!!null" {
			return r // an empty rule: the tool is configured, with defaults
		}
		if a, ok := d.action(n, at); ok {
			r.action = &verdict{action: a, id: id + ".action"}
			return r
		}
		return nil
	}
	for _, f := range d.fields(n, at) {
		name := join(at, f.raw)
		switch f.key {
		case "action":
			if a, ok := d.action(f.value, name); ok {
				r.action = stricter(r.action, &verdict{action: a, id: id + "." + f.raw})
			}
		case "enabled":
			if v, ok := d.boolean(f.value, name); ok && !v {
				r.action = stricter(r.action, &verdict{action: Deny, id: id + "." + f.raw})
			}
		case "auto_execute":
			if v, ok := d.boolean(f.value, name); ok {
				a := Allow
				if !v {
					a = Ask
				}
				r.action = stricter(r.action, &verdict{action: a, id: id + "." + f.raw})
			}
		case "timeout":
			r.timeout, _ = d.duration(f.value, name)
		case "approvers":
			r.approvers, _ = d.integer(f.value, name, 1)
		case "approval_timeout":
			r.approvalTimeout, _ = d.duration(f.value, name)
		case "constraints":
			d.constraints(f.value, &r.constraints, name, id+"."+f.raw)
		case "whitelist", "blacklist":
			pats := d.patterns(f.value, name, id+"."+f.raw)
			if f.key == "whitelist" {
				r.whitelist = append(r.whitelist, pats...)
			} else {
				r.blacklist = append(r.blacklist, pats...)
			}
		case "description":
			d.str(f.value, name)
		case "max_size", "allowed_paths", "denied_paths", "max_results":
			d.constraintField(f, &r.constraints, at, id)
		default:
			if shell && d.execField(f, &r.exec, at, id) {
				continue
			}
			if !shell && isExecKey(f.key) {
				d.errf(f.kn, name, "%s applies to shell tools (bash, run_shell, exec) only", f.raw)
				continue
			}
			d.errf(f.kn, name, "unknown field (expected action, enabled, auto_execute, timeout, approvers, approval_timeout, constraints, whitelist or blacklist)")
		}
	}
	return r
}

func isExecKey(k string) bool {
	switch k {
	case "security", "ask", "safe_bins", "confirm_dangerous", "confirm_dangerous_commands", "dangerous_whitelist", "neutral_builtins",
		"dangerous_command_whitelist", "allowed_directories", "enable_sandbox", "default_working_directory":
		return true
	}
	return false
}

func stricter(a, b *verdict) *verdict {
	if a == nil || b.action.Rank() > a.action.Rank() {
		return b
	}
	return a
}

// patterns decodes whitelist/blacklist command patterns into argv tokens.
func (d *decoder) patterns(n *yaml.Node, at, id string) []tokenPattern {
	var out []tokenPattern
	for i, c := range d.strings(n, at) {
		toks := strings.Fields(c.Value)
		if len(toks) == 0 {
			continue
		}
		bad := false
		for _, t := range toks {
			if _, err := path.Match(t, ""); err != nil {
				d.errf(c, fmt.Sprintf("%s[%d]", at, i), "bad pattern token %q: %v", t, err)
				bad = true
			}
		}
		if !bad {
			out = append(out, tokenPattern{id: fmt.Sprintf("%s[%d]", id, i), raw: c.Value, tokens: toks, line: c.Line})
		}
	}
	return out
}

func (d *decoder) exec(n *yaml.Node, e *execConfig, at, id string) {
	for _, f := range d.fields(n, at) {
		switch f.key {
		case "whitelist", "blacklist":
			pats := d.patterns(f.value, join(at, f.raw), id+"."+f.raw)
			if f.key == "whitelist" {
				e.whitelist = append(e.whitelist, pats...)
			} else {
				e.blacklist = append(e.blacklist, pats...)
			}
			e.set = true
		default:
			if !d.execField(f, e, at, id) {
				d.errf(f.kn, join(at, f.raw), "unknown field (expected security, ask, safe_bins, whitelist, blacklist, confirm_dangerous, dangerous_whitelist, neutral_builtins or allowed_directories)")
			}
		}
	}
}

func (d *decoder) execField(f field, e *execConfig, at, id string) bool {
	name := join(at, f.raw)
	fid := id + "." + f.raw
	switch f.key {
	case "security":
		if s, ok := d.str(f.value, name); ok {
			switch strings.ToLower(s) {
			case "deny":
				e.security = SecurityDeny
			case "allowlist", "allow_list", "allow-list":
				e.security = SecurityAllowlist
			case "full":
				e.security = SecurityFull
			default:
				d.errf(f.value, name, "must be deny, allowlist or full, not %q", s)
			}
			e.securityID = fid
		}
	case "ask":
		v := f.value
		if v.Kind == yaml.ScalarNode && (v.Value == "false" || v.Value == "true") {
			e.ask = AskOff
			if v.Value == "true" {
				e.ask = AskOnMiss
			}
			e.askID = fid
			break
		}
		if s, ok := d.str(v, name); ok {
			switch strings.ReplaceAll(strings.ToLower(s), "-", "_") {
			case "off", "never":
				e.ask = AskOff
			case "on_miss", "onmiss":
				e.ask = AskOnMiss
			case "always":
				e.ask = AskAlways
			default:
				d.errf(v, name, "must be off, on_miss or always, not %q", s)
			}
			e.askID = fid
		}
	case "safe_bins":
		for i, c := range d.strings(f.value, name) {
			if strings.ContainsAny(c.Value, " \t/") {
				d.errf(c, fmt.Sprintf("%s[%d]", name, i), "a safe bin is a program name such as jq, without spaces or slashes")
				continue
			}
			e.safeBins = append(e.safeBins, pathEntry{id: fmt.Sprintf("%s[%d]", fid, i), raw: c.Value, line: c.Line})
		}
	case "confirm_dangerous", "confirm_dangerous_commands":
		if v, ok := d.boolean(f.value, name); ok {
			e.confirmDangerous, e.confirmID = &v, fid
		}
	case "neutral_builtins":
		if v, ok := d.boolean(f.value, name); ok {
			e.neutralBuiltins, e.neutralID = &v, fid
		}
	case "dangerous_whitelist", "dangerous_command_whitelist":
		e.dangerousWhitelist = append(e.dangerousWhitelist, d.patterns(f.value, name, fid)...)
	case "allowed_directories":
		for i, c := range d.strings(f.value, name) {
			e.allowedDirs = append(e.allowedDirs, pathEntry{id: fmt.Sprintf("%s[%d]", fid, i), raw: c.Value, line: c.Line})
		}
	case "enable_sandbox", "default_working_directory":
		d.warnf(f.kn.Line, name, "has no effect in a policy: the worker's sandbox and working directory are set in its configuration")
	default:
		return false
	}
	e.set = true
	return true
}

func (d *decoder) constraints(n *yaml.Node, c *constraints, at, id string) {
	for _, f := range d.fields(n, at) {
		if !d.constraintField(f, c, at, id) {
			d.errf(f.kn, join(at, f.raw), "unknown field (expected max_size, max_results, allowed_paths or denied_paths)")
		}
	}
}

func (d *decoder) constraintField(f field, c *constraints, at, id string) bool {
	name := join(at, f.raw)
	fid := id + "." + f.raw
	switch f.key {
	case "max_size":
		if v, ok := d.size(f.value, name); ok {
			c.maxSize, c.maxSizeID = v, fid
		}
	case "max_results":
		c.maxResults, _ = d.integer(f.value, name, 1)
	case "allowed_paths", "allowed_directories":
		for i, n := range d.strings(f.value, name) {
			c.allowed = append(c.allowed, pathEntry{id: fmt.Sprintf("%s[%d]", fid, i), raw: n.Value, line: n.Line})
		}
	case "denied_paths":
		for i, n := range d.strings(f.value, name) {
			g, err := compileGlob(n.Value, d.home)
			if err != nil {
				d.errf(n, fmt.Sprintf("%s[%d]", name, i), "%v", err)
				continue
			}
			g.id, g.line = fmt.Sprintf("%s[%d]", fid, i), n.Line
			c.denied = append(c.denied, g)
		}
	default:
		return false
	}
	return true
}

func (d *decoder) agents(n *yaml.Node, p *Policy) {
	for _, f := range d.fields(n, "agents") {
		name := "agents." + f.raw
		pat := strings.TrimSpace(f.raw)
		if pat == "" {
			d.errf(f.kn, name, "agent pattern cannot be empty")
			continue
		}
		if _, err := path.Match(pat, ""); err != nil {
			d.errf(f.kn, name, "bad agent pattern %q: %v", pat, err)
			continue
		}
		o := &overlay{pattern: pat, line: f.kn.Line, layer: newLayer("agents." + pat + ".")}
		for _, g := range d.fields(f.value, name) {
			if g.key == "examples" {
				d.examples(g.value, join(name, g.raw), pat, p)
				continue
			}
			if !d.layerField(g, o.layer, name) {
				d.errf(g.kn, join(name, g.raw), "unknown field (expected default, enabled, allow, deny, ask, exec, tools, kinds, constraints, network or examples)")
			}
		}
		p.agents = append(p.agents, o)
	}
}
