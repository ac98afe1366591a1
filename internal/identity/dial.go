package identity

import (
	"errors"
	"fmt"
	"os"
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
		who := ""
		if creds != nil {
			who = " as " + creds.String()
		}
		err = fmt.Errorf("connect to NATS at %s%s: %w", RedactURL(url), who, err)
		if creds != nil && (errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAuthExpired)) {
			err = fmt.Errorf("%w\n%s", err, AuthHint(credsFile))
		}
		return nil, nil, err
	}
	return nc, creds, nil
}

// AuthHint says, after the server refused credentials (nats.ErrAuthorization), which ones they
// were and what to do: most often the server belongs to another install
// (another user's, or another state directory's) than the one the
// credentials came from.
func AuthHint(credsFile string) string {
	if credsFile == "" {
		credsFile = os.Getenv(EnvCreds)
	}
	if credsFile != "" {
		return fmt.Sprintf("the server refused the credentials in %s: they were issued by another install than the server's, expired, revoked, or minted before agents got an account of their own (every earlier credential is revoked by that upgrade); "+
			"mint new ones where the server's install lives (toolctl creds ..., run as the user and with the state directory of the worker that serves it)", credsFile)
	}
	state, err := StatePath()
	if err != nil {
		state = "the state directory"
	}
	return fmt.Sprintf("the server refused credentials minted from the state directory %s: it trusts another install "+
		"(a worker started by another user, or with another %s); run this as that user with the same %s, or pass --creds (or %s) with credentials minted there",
		state, EnvStateDir, EnvStateDir, EnvCreds)
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
