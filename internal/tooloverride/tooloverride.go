// Package tooloverride is the operator's last word on the tools a worker
// registers, whatever their source (built-in, MCP, remote): a file that
// disables tools or sets their kind, description, timeouts and output
// bound. It applies to every registration, also to tools that come later
// (an MCP server connecting, a remote service appearing), so the same
// file gives the same registry on every worker.
package tooloverride

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// ErrConfig wraps every problem of an overrides file.
var ErrConfig = errors.New("invalid tool overrides")

// Config is an overrides file.
type Config struct {
	// Tools are the overrides by tool name or name glob (mcp__github__*);
	// for a tool several entries match, the exact name first, then the
	// globs in sorted order, each setting only what it sets.
	Tools map[string]Override `yaml:"tools"`
	// Cache turns on the fleet-wide result cache of the read-only
	// built-in tools (read, ls, grep, glob); off when absent.
	Cache Cache `yaml:"cache"`
}

// Cache configures the result cache (internal/resultcache).
type Cache struct {
	// Enabled turns it on.
	Enabled bool `yaml:"enabled"`
	// TTL is how long an entry may be served; default 5 minutes, at most
	// one hour.
	TTL time.Duration `yaml:"ttl"`
}

// Override changes one tool. The zero value of each field changes
// nothing.
type Override struct {
	// Disabled leaves the tool out of the registry.
	Disabled bool `yaml:"disabled"`
	// Kind replaces the tool's kind for policies.
	Kind policy.Kind `yaml:"kind"`
	// Description replaces what models are told.
	Description string `yaml:"description"`
	// Timeout replaces the default timeout of one execution.
	Timeout time.Duration `yaml:"timeout"`
	// MaxTimeout replaces the most a caller may ask for.
	MaxTimeout time.Duration `yaml:"max_timeout"`
	// MaxOutput replaces the output bound in characters.
	MaxOutput int `yaml:"max_output"`
}

var kinds = map[policy.Kind]bool{policy.KindRead: true, policy.KindWrite: true, policy.KindExecute: true,
	policy.KindSearch: true, policy.KindNetwork: true, policy.KindOther: true}

// Load reads and checks an overrides file (YAML or JSON).
func Load(file string) (*Config, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return c, nil
}

// Parse decodes and checks an overrides document; unknown fields are
// errors.
func Parse(data []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	var problems []string
	for _, name := range c.names() {
		o := c.Tools[name]
		if _, err := path.Match(name, ""); err != nil || name == "" {
			problems = append(problems, fmt.Sprintf("tools.%s: not a tool name or glob", name))
		}
		if o.Kind != "" && !kinds[o.Kind] {
			problems = append(problems, fmt.Sprintf("tools.%s.kind: %q is not read, write, execute, search, network or other", name, o.Kind))
		}
		if o.Timeout < 0 || o.MaxTimeout < 0 || o.MaxOutput < 0 {
			problems = append(problems, fmt.Sprintf("tools.%s: timeouts and max_output cannot be negative", name))
		}
	}
	if c.Cache.TTL < 0 || c.Cache.TTL > time.Hour {
		problems = append(problems, fmt.Sprintf("cache.ttl: %s is not between 0 and 1h", c.Cache.TTL))
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrConfig, strings.Join(problems, "; "))
	}
	return &c, nil
}

func (c *Config) names() []string {
	var out []string
	for n := range c.Tools {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Apply returns t as the overrides change it (a copy), or nil when an
// override disables it. It is a tools.Override.
func (c *Config) Apply(t *tools.Tool) *tools.Tool {
	var matched []Override
	if o, ok := c.Tools[t.Name]; ok {
		matched = append(matched, o)
	}
	for _, n := range c.names() {
		if n == t.Name || !strings.ContainsAny(n, "*?[") {
			continue
		}
		if ok, _ := path.Match(n, t.Name); ok {
			matched = append(matched, c.Tools[n])
		}
	}
	if len(matched) == 0 {
		return t
	}
	out := *t
	// Later entries first, so that the exact name is applied last and wins.
	for i := len(matched) - 1; i >= 0; i-- {
		o := matched[i]
		if o.Disabled {
			return nil
		}
		if o.Kind != "" {
			out.Kind = o.Kind
		}
		if o.Description != "" {
			out.Description = o.Description
		}
		if o.Timeout > 0 {
			out.DefaultTimeout = o.Timeout
		}
		if o.MaxTimeout > 0 {
			out.MaxTimeout = o.MaxTimeout
		}
		if o.MaxOutput > 0 {
			out.MaxOutput = o.MaxOutput
		}
	}
	return &out
}
