package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/egress/relay"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/bash"
	"github.com/toolgate/toolgate/pkg/tools/web"
)

// dialerFor returns the egress dialer of a call: the calling agent's
// network allowlist in force at each connection (so a policy change
// applies at once), and the address checks.
func dialerFor(gate *policy.Gate, c *tools.Call) *egress.Dialer {
	agent := c.Agent
	return egress.PolicyDialer(func() *policy.Egress { return gate.Egress(agent) })
}

// registerWeb adds web_fetch, and web_search when a search API key is
// set, to reg.
func registerWeb(reg *tools.Registry, gate *policy.Gate, o Options) error {
	cfg := web.Config{
		Fetch:  web.FetchConfig{Egress: func(c *tools.Call) web.Egress { return dialerFor(gate, c) }},
		Search: web.SearchConfig{APIKey: o.SearchAPIKey, BaseURL: o.SearchURL},
	}
	if err := web.Register(reg, cfg); err != nil {
		return fmt.Errorf("web tools: %w", err)
	}
	if o.SearchAPIKey == "" {
		o.Logger.Info("web_search is off: no search API key (set TAVILY_API_KEY)")
	}
	return nil
}

// bashProxy is the egress proxy of bash calls granted the network: a
// filtering proxy per call on a unix socket, reached from the sandbox
// through the relay, which is this program run with relay.ForwardArg
// (its main calls relay.MaybeForward). Nil, with the reason, when this
// program's executable cannot be found: such calls then get no network.
func bashProxy(gate *policy.Gate, log *slog.Logger) (*bash.Proxy, error) {
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return nil, fmt.Errorf("the relay (this program) cannot be found: %w", err)
	}
	return &bash.Proxy{
		Relay: []string{exe, relay.ForwardArg},
		Open: func(ctx context.Context, c *tools.Call) (string, func() []string, error) {
			p := &egress.Proxy{Dialer: dialerFor(gate, c), Logger: log.With("call_id", c.ID, "agent", c.Agent)}
			s, err := egress.ListenUnix(p, "")
			if err != nil {
				return "", nil, err
			}
			return s.Path, func() []string { s.Close(); return p.Refused() }, nil
		},
	}, nil
}
