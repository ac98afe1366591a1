// Package web holds toolgate's network tools: web_fetch (GET a URL,
// bounded in size and time, HTML turned into readable text) and
// web_search (a Tavily-compatible search client). Both are of kind
// network. web_fetch connects only through the call's Egress, which
// judges every host (every redirect too) against the policy's network
// allowlist and every address after DNS resolution; web_search talks
// only to the search endpoint the operator configured.
package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"

	"github.com/toolgate/toolgate/pkg/tools"
)

// Egress is how one call reaches the network (internal/egress.Dialer).
type Egress interface {
	// Check judges host:port against the call's allowlist.
	Check(host string, port int) error
	// DialContext connects to addr after judging its host and the
	// addresses it resolves to.
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// Register adds web_fetch, and web_search when cfg.Search has an API key,
// to reg.
func Register(reg *tools.Registry, cfg Config) error {
	f, err := NewFetch(cfg.Fetch)
	if err != nil {
		return err
	}
	if err := reg.Register(f); err != nil {
		return err
	}
	if cfg.Search.APIKey == "" {
		return nil
	}
	s, err := NewSearch(cfg.Search)
	if err != nil {
		return err
	}
	return reg.Register(s)
}

// Config configures both tools.
type Config struct {
	Fetch  FetchConfig  `yaml:"fetch" json:"fetch"`
	Search SearchConfig `yaml:"search" json:"search"`
}

// args decodes the validated arguments, again when the handler is called
// directly.
func args(c *tools.Call) (map[string]any, error) {
	if c.Args != nil {
		return c.Args, nil
	}
	m := map[string]any{}
	if len(c.Arguments) > 0 {
		if err := json.Unmarshal(c.Arguments, &m); err != nil {
			return nil, fmt.Errorf("%w: %v", tools.ErrInvalidArguments, err)
		}
	}
	return m, nil
}

func fail(format string, a ...any) *tools.Output {
	return &tools.Output{Content: fmt.Sprintf(format, a...), IsError: true}
}

var errNoEgress = errors.New("web_fetch: no egress configured: every connection is refused")
