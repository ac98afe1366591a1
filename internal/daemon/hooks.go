package daemon

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/pkg/hooks"
)

// loadHooks reads the --hooks file; without one, no hooks run and the
// built-in redaction is on.
func loadHooks(o Options) (*hooks.Config, error) {
	if o.HooksFile == "" {
		return &hooks.Config{}, nil
	}
	c, err := hooks.Load(o.HooksFile)
	if err != nil {
		return nil, fmt.Errorf("--hooks: %w", err)
	}
	return c, nil
}

// buildHooks makes the worker's hook chain: the configured hooks, asked
// over nc, and the redaction of secrets, which knows the worker's own
// credentials (the JWT and seed of its creds, a token or password in
// its NATS URL).
func buildHooks(c *hooks.Config, o Options, nc *nats.Conn, creds *identity.Creds, tel *telemetry.Telemetry) (*hooks.Chain, error) {
	secrets := urlSecrets(o.NATSURL)
	if creds != nil {
		secrets = append(secrets, creds.JWT)
		if seed, err := creds.Key.Seed(); err == nil {
			secrets = append(secrets, string(seed))
		}
	}
	bo := hooks.BuildOptions{Conn: nc, Secrets: secrets, Logger: o.Logger}
	if tel != nil {
		bo.Meter = tel.Meter
	}
	ch, err := c.Build(bo)
	if err != nil {
		return nil, fmt.Errorf("--hooks: %w", err)
	}
	return ch, nil
}

// urlSecrets are the passwords and tokens in a NATS URL list.
func urlSecrets(urls string) []string {
	var out []string
	for _, u := range strings.Split(urls, ",") {
		p, err := url.Parse(strings.TrimSpace(u))
		if err != nil || p.User == nil {
			continue
		}
		if pw, ok := p.User.Password(); ok {
			out = append(out, pw)
		} else if tok := p.User.Username(); tok != "" {
			out = append(out, tok) // nats://TOKEN@host
		}
	}
	return out
}
