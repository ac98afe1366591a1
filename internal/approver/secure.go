package approver

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// SecureCookie values: when the session cookie is marked Secure (sent by
// browsers over HTTPS only).
const (
	// SecureCookieAuto marks it when the request came over TLS, or through
	// a trusted proxy that says the client used HTTPS (X-Forwarded-Proto:
	// https, or Forwarded: proto=https): a TLS-terminating ingress.
	SecureCookieAuto = "auto"
	// SecureCookieAlways marks it on every response.
	SecureCookieAlways = "always"
	// SecureCookieNever never marks it (plain-HTTP access through a proxy
	// that says https).
	SecureCookieNever = "never"
)

// DefaultTrustedProxies are the addresses whose X-Forwarded-Proto and
// Forwarded headers count when Config.TrustedProxies is nil: loopback and
// private networks, where a cluster's ingress controller or a local
// reverse proxy connects from.
var DefaultTrustedProxies = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"), netip.MustParsePrefix("fc00::/7"),
}

// ParseSecureCookie checks a SecureCookie value; empty is auto.
func ParseSecureCookie(v string) (string, error) {
	switch v {
	case "", SecureCookieAuto:
		return SecureCookieAuto, nil
	case SecureCookieAlways, SecureCookieNever:
		return v, nil
	}
	return "", fmt.Errorf("secure cookie %q: want auto, always or never", v)
}

// ParseProxies reads a comma-separated list of addresses and CIDR
// prefixes (10.0.0.0/8, 192.0.2.7, fd00::/8).
func ParseProxies(v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %q: %w", f, err)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: %w", f, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// secureCookie reports whether the session cookie answering r is marked
// Secure, by s.cfg.SecureCookie.
func (s *Server) secureCookie(r *http.Request) bool {
	switch s.cfg.SecureCookie {
	case SecureCookieAlways:
		return true
	case SecureCookieNever:
		return false
	}
	if r.TLS != nil {
		return true
	}
	proxies := s.cfg.TrustedProxies
	if proxies == nil {
		proxies = DefaultTrustedProxies
	}
	return fromProxy(r, proxies) && forwardedHTTPS(r.Header)
}

// fromProxy reports whether r's peer is one of proxies.
func fromProxy(r *http.Request, proxies []netip.Prefix) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedHTTPS reports whether the proxy headers say the client's
// request was HTTPS: the first X-Forwarded-Proto value, or the proto of
// the first Forwarded element (RFC 7239), the one the client-facing
// proxy wrote.
func forwardedHTTPS(h http.Header) bool {
	if v := h.Get("X-Forwarded-Proto"); v != "" {
		first, _, _ := strings.Cut(v, ",")
		return strings.EqualFold(strings.TrimSpace(first), "https")
	}
	if v := h.Get("Forwarded"); v != "" {
		first, _, _ := strings.Cut(v, ",")
		for _, pair := range strings.Split(first, ";") {
			k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
			if ok && strings.EqualFold(k, "proto") {
				return strings.EqualFold(strings.Trim(val, `"`), "https")
			}
		}
	}
	return false
}
