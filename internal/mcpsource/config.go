// Package mcpsource makes MCP servers tool sources of a worker: each
// server named in an mcpServers file (the format Claude Code, Cursor and
// others use) is started or reached, and its tools join the registry as
// mcp__<server>__<tool> with their input schemas. A server that stops is
// restarted with backoff; its tools leave the registry while it is down
// and come back with it, so the worker announces ToolUnregistered and
// ToolRegistered events.
//
// The servers' word about their tools (annotations such as readOnlyHint)
// is a hint, never trusted: every MCP tool has the kind the configuration
// gives it, execute when it gives none, and the policy gate judges its
// calls like any other tool's.
package mcpsource

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/toolgate/toolgate/pkg/policy"
)

// ErrConfig wraps every problem of an mcpServers file.
var ErrConfig = errors.New("invalid MCP servers configuration")

// Config is an mcpServers file.
type Config struct {
	// Servers are the MCP servers by name; the name is the middle part of
	// their tools' names (mcp__<name>__<tool>).
	Servers map[string]*Server `json:"mcpServers"`
}

// Server is one MCP server: a command run over stdio, or a Streamable
// HTTP URL. ${VAR} in args, env values, url and headers is replaced by
// the worker's environment variable VAR.
type Server struct {
	// Type is "stdio" or "http" (also "streamable-http"); optional, implied
	// by Command or URL.
	Type string `json:"type,omitempty"`
	// Command runs a stdio server.
	Command string `json:"command,omitempty"`
	// Args are the command's arguments.
	Args []string `json:"args,omitempty"`
	// Env is added to the small environment the command runs with (PATH,
	// HOME, USER, LANG, TMPDIR of the worker); nothing else of the
	// worker's environment reaches it.
	Env map[string]string `json:"env,omitempty"`
	// URL is a Streamable HTTP server's endpoint.
	URL string `json:"url,omitempty"`
	// Headers are sent with every HTTP request (Authorization, ...).
	Headers map[string]string `json:"headers,omitempty"`
	// Kind is the policy kind of every tool of the server (read, write,
	// execute, search, network, other); default execute. The servers' own
	// annotations never change it.
	Kind policy.Kind `json:"kind,omitempty"`
	// Disabled leaves the server out.
	Disabled bool `json:"disabled,omitempty"`
}

// serverName is what a server name may be: it must fit a tool name and a
// subject token. Compiled on first use.
var serverName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9_-]{1,32}$`) })

var kinds = map[policy.Kind]bool{policy.KindRead: true, policy.KindWrite: true, policy.KindExecute: true,
	policy.KindSearch: true, policy.KindNetwork: true, policy.KindOther: true}

// Load reads and checks an mcpServers file.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse decodes and checks an mcpServers document. Unknown fields are
// errors, so that a misspelt setting is not silently ignored.
func Parse(data []byte) (*Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if c.Servers == nil {
		return nil, fmt.Errorf("%w: no \"mcpServers\" object", ErrConfig)
	}
	var problems []string
	for _, name := range c.Names() {
		if err := c.Servers[name].check(name); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrConfig, strings.Join(problems, "; "))
	}
	return &c, nil
}

// Names are the enabled servers' names, sorted.
func (c *Config) Names() []string {
	var out []string
	for n, s := range c.Servers {
		if s != nil && !s.Disabled {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

func (s *Server) check(name string) error {
	at := "mcpServers." + name
	if !serverName().MatchString(name) || strings.Contains(name, "__") {
		return fmt.Errorf("%s: the name must be 1 to 32 letters, digits, '_' or '-' without \"__\"", at)
	}
	switch s.Type {
	case "", "stdio", "http", "streamable-http":
	case "sse":
		return fmt.Errorf("%s.type: the deprecated SSE transport is not supported; use the server's Streamable HTTP endpoint", at)
	default:
		return fmt.Errorf("%s.type: %q is not stdio or http", at, s.Type)
	}
	switch {
	case s.Command != "" && s.URL != "":
		return fmt.Errorf("%s: give either command or url, not both", at)
	case s.Command == "" && s.URL == "":
		return fmt.Errorf("%s: give a command (stdio) or a url (http)", at)
	case s.Command != "" && (s.Type == "http" || s.Type == "streamable-http"):
		return fmt.Errorf("%s: type %s needs a url, not a command", at, s.Type)
	case s.URL != "" && s.Type == "stdio":
		return fmt.Errorf("%s: type stdio needs a command, not a url", at)
	case s.URL == "" && len(s.Headers) > 0:
		return fmt.Errorf("%s.headers: only an http server takes headers", at)
	case s.Command == "" && (len(s.Args) > 0 || len(s.Env) > 0):
		return fmt.Errorf("%s: args and env are for a command", at)
	}
	if s.URL != "" {
		u, err := url.Parse(os.ExpandEnv(s.URL))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s.url: %q is not an http(s) URL", at, s.URL)
		}
	}
	if s.Kind != "" && !kinds[s.Kind] {
		return fmt.Errorf("%s.kind: %q is not read, write, execute, search, network or other", at, s.Kind)
	}
	return nil
}

// kind is the policy kind of the server's tools.
func (s *Server) kind() policy.Kind {
	if s.Kind == "" {
		return policy.KindExecute
	}
	return s.Kind
}
