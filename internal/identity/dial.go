package identity

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
)

// Dial connects to url as role name. The credentials are credsFile, else
// $TOOLGATE_CREDS, else minted from the calling user's install (see
// Resolve); a URL carrying a user or token authenticates with that
// instead (deploy's password accounts), creds is nil and the inbox
// prefix is still the one the role's permissions allow. Errors show the
// URL redacted.
func Dial(url, credsFile string, role Role, name string, opts ...nats.Option) (nc *nats.Conn, creds *Creds, err error) {
	if !HasUserInfo(url) || credsFile != "" {
		if creds, err = Resolve(credsFile, role, name); err != nil {
			return nil, nil, err
		}
		opts = append(opts, creds.NATSOptions()...)
	} else if name != "" {
		opts = append(opts, nats.CustomInboxPrefix(InboxPrefix(role, name)))
	}
	nc, err = nats.Connect(url, opts...)
	if err != nil {
		who, hint := "", ""
		if creds != nil {
			who = " as " + creds.String()
			if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAuthExpired) {
				hint = " (credentials minted before toolgate put agents in an account of their own, or revoked, are refused: mint them again with `toolctl creds` or `toolctl nats-config`)"
			}
		}
		return nil, nil, fmt.Errorf("connect to NATS at %s%s: %w%s", RedactURL(url), who, err, hint)
	}
	return nc, creds, nil
}

// HasUserInfo reports whether a NATS URL (or comma-separated list) carries
// a user, password or token.
func HasUserInfo(url string) bool {
	for _, u := range strings.Split(url, ",") {
		if _, rest, ok := strings.Cut(u, "://"); ok && strings.Contains(rest, "@") {
			return true
		}
	}
	return false
}
