package identity

import (
	"net/url"
	"strings"
)

// RedactURL returns a NATS URL (or a comma-separated list of them) fit for
// logs and errors: a password shows as nats://user:***@host, a token or
// a user with no password as nats://***@host.
func RedactURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = redactOne(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

func redactOne(s string) string {
	at := strings.LastIndex(s, "@")
	if at < 0 {
		return s
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		scheme, rest = "", s
	}
	at = strings.LastIndex(rest, "@")
	if at < 0 {
		return s
	}
	host := rest[at+1:]
	userinfo := rest[:at]
	red := "***"
	if u, _, hasPass := strings.Cut(userinfo, ":"); hasPass {
		if uu, err := url.PathUnescape(u); err == nil {
			u = uu
		}
		red = u + ":***"
	}
	if scheme != "" {
		return scheme + "://" + red + "@" + host
	}
	return red + "@" + host
}
