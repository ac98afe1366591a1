package client

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/eventsig"
	"github.com/toolgate/toolgate/pkg/trust"
)

// Results are taken only when they verify (pkg/eventsig): signed by
// a worker whose user JWT an account the client trusts issued, and the
// result of the very call waited for (its call id, agent, type and a
// worker source). Anything else arriving on the call's result subject, or
// stored there, is refused, logged and counted (Refused), and the client
// goes on waiting for the real result.

// WithTrustedAccounts names the account public keys (A...) whose workers'
// results the client accepts. Default: the account that issued the
// credentials in $TOOLGATE_CREDS, else the account of the install in the
// local state directory (when there is one); with neither, every result
// is refused.
func WithTrustedAccounts(keys ...string) Option {
	return func(c *Client) { c.trusted = append(c.trusted, keys...) }
}

// WithCredsTrust trusts the workers of the account that issued the
// credentials in file (the agent's .creds file, as given to Credentials):
// the install's account, whose workers answer the agent.
func WithCredsTrust(file string) Option {
	return func(c *Client) {
		cr, err := trust.LoadCreds(file)
		if err != nil {
			c.optErr = fmt.Errorf("trust of %s: %w", file, err)
			return
		}
		c.trusted = append(c.trusted, cr.Services)
	}
}

// defaultTrust is the account that issued the agent's credentials: the
// file $TOOLGATE_CREDS names, else the local install (when it exists).
func defaultTrust() []string {
	if f := os.Getenv(trust.EnvCreds); f != "" {
		if cr, err := trust.LoadCreds(f); err == nil {
			return []string{cr.Services}
		}
	}
	if pub, err := trust.LocalAccount(); err == nil { // toolgate ran here: its install's workers answer
		return []string{pub}
	}
	return nil
}

// newVerifier builds the client's verifier from its trusted accounts.
func (c *Client) newVerifier() error {
	if len(c.trusted) == 0 {
		c.trusted = defaultTrust()
	}
	v, err := trust.NewVerifier(c.trusted, nil)
	if err != nil {
		return err
	}
	c.verify = eventsig.New(v)
	return nil
}

// result returns the result message m carries for call id when it
// verifies; otherwise it logs and counts the refusal and returns nil.
func (c *Client) result(h nats.Header, data []byte, id string) *events.ResultData {
	r, err := c.verify.Result(h, data, c.agent, id, "")
	if err != nil {
		c.refused.Add(1)
		slog.Warn("result refused", "agent", c.agent, "call_id", id, "err", err)
		return nil
	}
	return r
}

// Refused counts the messages this client refused as results: unsigned,
// signed by no trusted worker, or not the result of the call they came
// for.
func (c *Client) Refused() int64 { return c.refused.Load() }
