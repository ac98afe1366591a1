package hooks

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/metric"
	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/pkg/events"
)

// Config is a hooks file (worker --hooks FILE): the hooks every worker of
// a fleet runs, in order, and the built-in redaction. Give every worker
// the same file. The zero value runs no hooks and redacts.
type Config struct {
	// Redact configures the built-in redaction of secrets in outputs.
	Redact RedactConfig `yaml:"redact"`
	// Before are the before hooks, in the order they run.
	Before []HookConfig `yaml:"before"`
	// After are the after hooks, in the order they run.
	After []HookConfig `yaml:"after"`

	file string // where the configuration was read from, for errors
}

// RedactConfig configures the built-in redaction hook.
type RedactConfig struct {
	// Disabled turns the redaction off (it is on by default).
	Disabled bool `yaml:"disabled"`
	// Patterns are further secret formats: kind → regular expression (RE2
	// syntax). A pattern with a group replaces only its first group.
	Patterns map[string]string `yaml:"patterns"`
}

// HookConfig is one hook of a Config.
type HookConfig struct {
	// Name identifies the hook in results, audit and denials; a subject
	// token. Without Subject it names an in-process hook the program
	// provides (BuildOptions.InProcess).
	Name string `yaml:"name"`
	// Subject is where a remote hook service answers (NATS
	// request/reply); by convention toolgate.hook.<name>, the subject the
	// hook role may answer on.
	Subject string `yaml:"subject"`
	// Timeout bounds one answer; zero means DefaultTimeout (5s).
	Timeout time.Duration `yaml:"timeout"`
	// FailOpen passes over the hook when it fails or does not answer;
	// by default the call is refused (before) or its output withheld
	// (after).
	FailOpen bool `yaml:"fail_open"`
	// Tools limits the hook to these tools; empty means every tool.
	Tools []string `yaml:"tools"`

	line int
}

func (h HookConfig) timeout() time.Duration {
	if h.Timeout > 0 {
		return h.Timeout
	}
	return DefaultTimeout
}

// maxHookTimeout bounds a hook's timeout: a call waits for it.
const maxHookTimeout = 5 * time.Minute

// MaxBeforeTotal bounds the before hooks' timeouts added up. A call waits
// for them before the gate has judged it and before its claim, when
// nothing keeps its message in progress yet: longer, and the message
// would be delivered again (after the stream's ack wait, 30s) while its
// hooks still run.
const MaxBeforeTotal = 20 * time.Second

// Load reads and checks a hooks file.
func Load(file string) (*Config, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return Parse(b, file)
}

// yamlLine finds the line numbers in the YAML decoder's errors.
var yamlLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`line (\d+): `) })

// Parse decodes and checks a hooks document; file names it in errors,
// which say file:line and what is wrong. Unknown fields are errors.
func Parse(data []byte, file string) (*Config, error) {
	if file == "" {
		file = "hooks"
	}
	c := &Config{file: file}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		msg = strings.TrimPrefix(msg, "unmarshal errors:\n  ")
		msg = strings.ReplaceAll(msg, "\n  ", "; ")
		msg = yamlLine().ReplaceAllString(msg, file+":$1: ")
		if !strings.HasPrefix(msg, file+":") {
			msg = file + ": " + msg
		}
		return nil, fmt.Errorf("%w: %s", ErrConfig, msg)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err == nil && len(root.Content) == 1 {
		setLines(root.Content[0], "before", c.Before)
		setLines(root.Content[0], "after", c.After)
	}
	var problems []string
	add := func(line int, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s:%d: %s", file, line, fmt.Sprintf(format, args...)))
	}
	for _, stage := range []struct {
		name  string
		hooks []HookConfig
	}{{"before", c.Before}, {"after", c.After}} {
		seen := map[string]bool{}
		for i, h := range stage.hooks {
			at := fmt.Sprintf("%s[%d]", stage.name, i)
			switch {
			case h.Name == "":
				add(h.line, "%s: name is missing", at)
			case h.Name == RedactName:
				add(h.line, "%s: the name %q is the built-in redaction's (configure it under redact:)", at, h.Name)
			case events.ValidToken(h.Name) != nil:
				add(h.line, "%s: name %q is not a subject token (no dots, spaces or wildcards)", at, h.Name)
			case seen[h.Name]:
				add(h.line, "%s: hook %q is listed twice", at, h.Name)
			}
			seen[h.Name] = true
			if h.Subject != "" && !validSubject(h.Subject) {
				add(h.line, "%s (%s): subject %q is not a NATS subject without wildcards", at, h.Name, h.Subject)
			}
			if h.Timeout < 0 || h.Timeout > maxHookTimeout {
				add(h.line, "%s (%s): timeout %s is not between 0 and %s", at, h.Name, h.Timeout, maxHookTimeout)
			}
			for _, t := range h.Tools {
				if t == "" {
					add(h.line, "%s (%s): tools: an empty tool name", at, h.Name)
				}
			}
		}
	}
	var total time.Duration
	for _, h := range c.Before {
		total += h.timeout()
	}
	if total > MaxBeforeTotal {
		add(lineOf(&root, "before"), "before: the hooks' timeouts add up to %s (5s each when not set); at most %s: a call waits for them before it is judged", total, MaxBeforeTotal)
	}
	for kind, expr := range c.Redact.Patterns {
		if re, err := regexp.Compile(expr); err != nil {
			add(lineOf(&root, "redact"), "redact.patterns.%s: %v", kind, err)
		} else if expr == "" || re.MatchString("") {
			add(lineOf(&root, "redact"), "redact.patterns.%s: the pattern matches empty text", kind)
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w:\n%s", ErrConfig, strings.Join(problems, "\n"))
	}
	return c, nil
}

// setLines records the line of each hook of the sequence key.
func setLines(m *yaml.Node, key string, hooks []HookConfig) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != key {
			continue
		}
		for j, item := range m.Content[i+1].Content {
			if j < len(hooks) {
				hooks[j].line = item.Line
			}
		}
	}
}

func lineOf(root *yaml.Node, key string) int {
	if len(root.Content) == 1 {
		m := root.Content[0]
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == key {
				return m.Content[i].Line
			}
		}
	}
	return 1
}

func validSubject(s string) bool {
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n*>") {
			return false
		}
	}
	return true
}

// BuildOptions are what a Config needs to become a Chain.
type BuildOptions struct {
	// Conn is the connection remote hooks are asked over.
	Conn *nats.Conn
	// InProcess are the program's own hooks, by the name the
	// configuration lists them under (a HookConfig without subject). Those
	// the configuration does not list run after the listed ones, in name
	// order.
	InProcess map[string]Hook
	// Secrets are literal secrets to redact: the worker's credentials.
	Secrets []string
	// Logger receives hook failures.
	Logger *slog.Logger
	// Meter counts hook failures.
	Meter metric.Meter
}

// Build makes the chain c describes.
func (c *Config) Build(o BuildOptions) (*Chain, error) {
	if c == nil {
		c = &Config{}
	}
	var hooks []Hook
	listed := map[string]bool{}
	var problems []string
	for _, stage := range []struct {
		after bool
		list  []HookConfig
	}{{false, c.Before}, {true, c.After}} {
		for _, hc := range stage.list {
			h := Hook{Name: hc.Name, Timeout: hc.Timeout, FailOpen: hc.FailOpen, Tools: hc.Tools}
			if hc.Subject != "" {
				if o.Conn == nil {
					problems = append(problems, fmt.Sprintf("%s:%d: %s: a remote hook needs a NATS connection", c.file, hc.line, hc.Name))
					continue
				}
				r := &Remote{Name: hc.Name, Subject: hc.Subject, Conn: o.Conn}
				if stage.after {
					h.After = r
				} else {
					h.Before = r
				}
			} else {
				in, ok := o.InProcess[hc.Name]
				if !ok || (stage.after && in.After == nil) || (!stage.after && in.Before == nil) {
					problems = append(problems, fmt.Sprintf("%s:%d: %s: no subject, and this program has no in-process hook of that name for this stage", c.file, hc.line, hc.Name))
					continue
				}
				if stage.after {
					h.After = in.After
				} else {
					h.Before = in.Before
				}
				listed[hc.Name] = true
			}
			hooks = append(hooks, h)
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w:\n%s", ErrConfig, strings.Join(problems, "\n"))
	}
	var rest []string
	for name := range o.InProcess {
		if !listed[name] {
			rest = append(rest, name)
		}
	}
	slices.Sort(rest)
	for _, name := range rest {
		h := o.InProcess[name]
		h.Name = name
		hooks = append(hooks, h)
	}
	opts := Options{Logger: o.Logger, Meter: o.Meter}
	if !c.Redact.Disabled {
		r, err := NewRedactor(o.Secrets, c.Redact.Patterns)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: redact: %v", ErrConfig, c.file, err)
		}
		opts.Redactor = r
	}
	return New(hooks, opts)
}

// String describes the configuration for a start-up line.
func (c *Config) String() string {
	if c == nil {
		return "redaction on, no hooks"
	}
	var parts []string
	if c.Redact.Disabled {
		parts = append(parts, "redaction off")
	} else {
		parts = append(parts, "redaction on")
	}
	names := func(l []HookConfig) string {
		var n []string
		for _, h := range l {
			n = append(n, h.Name)
		}
		return strings.Join(n, ", ")
	}
	parts = append(parts, "before: "+strconv.Itoa(len(c.Before)))
	if len(c.Before) > 0 {
		parts[len(parts)-1] += " (" + names(c.Before) + ")"
	}
	parts = append(parts, "after: "+strconv.Itoa(len(c.After)))
	if len(c.After) > 0 {
		parts[len(parts)-1] += " (" + names(c.After) + ")"
	}
	return strings.Join(parts, "; ")
}
