package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/pkg/policy"
)

// ErrNoAllowlist: a Dialer was used without an Allow function.
var ErrNoAllowlist = errors.New("no network allowlist: every host is refused")

// Default bounds of a Dialer and its Transport.
const (
	DefaultDialTimeout = 30 * time.Second
	// maxHeaderBytes bounds a response's headers.
	maxHeaderBytes = 1 << 20
)

// Dialer opens outbound TCP connections for one agent: the host must
// pass Allow (the policy's network allowlist) before any DNS lookup, and
// every address the name resolves to must be a public unicast address
// (Check). The connection is made to an address that was checked, and the
// socket's Control hook checks the address actually connected to once
// more, so no later lookup (DNS rebinding) can slip a private address in.
// The zero value refuses everything.
type Dialer struct {
	// Allow judges a host and port (policy.Egress.Check); nil refuses
	// every host.
	Allow func(host string, port int) error
	// AllowAddr judges every address the host resolved to (and an
	// address written as the host) before it is connected to: the
	// policy's deny entries that are addresses or ranges
	// (policy.Egress.CheckAddr). Nil judges addresses by Check alone.
	AllowAddr func(a netip.Addr, port int) error
	// Resolver looks names up; nil means net.DefaultResolver.
	Resolver *net.Resolver
	// Timeout bounds one connection attempt; zero means
	// DefaultDialTimeout.
	Timeout time.Duration
	// Permit lists address prefixes allowed although they are not public
	// (an intranet the operator means to reach, or a test's loopback
	// server). It is set by the program that builds the Dialer, never
	// from a policy; the cloud metadata addresses stay refused.
	Permit []netip.Prefix
}

// PolicyDialer returns a Dialer that judges every host and every
// address by the network allowlist egress returns at each connection
// (so a policy change applies at once): Allow is its Check, AllowAddr its
// CheckAddr.
func PolicyDialer(egress func() *policy.Egress) *Dialer {
	return &Dialer{
		Allow:     func(host string, port int) error { return egress().Check(host, port) },
		AllowAddr: func(a netip.Addr, port int) error { return egress().CheckAddr(a, port) },
	}
}

// Check judges host:port by Allow alone (no lookup): what a client asks
// before it follows a redirect, for a clear refusal.
func (d *Dialer) Check(host string, port int) error {
	if d.Allow == nil {
		return ErrNoAllowlist
	}
	return d.Allow(host, port)
}

// DialContext connects to addr ("host:port") over network ("tcp",
// "tcp4", "tcp6") when the allowlist and the address checks allow it.
// Refusals wrap policy.ErrEgressDenied (from Allow) or
// ErrForbiddenAddress.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, fmt.Errorf("egress: network %q is not allowed", network)
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return nil, fmt.Errorf("egress: bad port %q", portStr)
	}
	if err := d.Check(host, port); err != nil {
		return nil, err
	}
	addrs, err := d.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	// Every address must pass: a name that resolves to a public and a
	// private address is refused whole.
	for _, a := range addrs {
		if err := Check(host, a, d.Permit); err != nil {
			return nil, err
		}
		if d.AllowAddr != nil {
			if err := d.AllowAddr(a, port); err != nil {
				return nil, fmt.Errorf("egress: %s resolves to %s: %w", host, a, err)
			}
		}
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	nd := &net.Dialer{Timeout: timeout, Control: d.control(host)}
	var first error
	for _, a := range addrs {
		if network == "tcp4" && !a.Is4() || network == "tcp6" && !a.Is6() {
			continue
		}
		c, err := nd.DialContext(ctx, network, netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if first == nil {
		first = fmt.Errorf("egress: %s has no %s address", host, network)
	}
	return nil, first
}

// resolve returns the addresses of host: itself when it is an address.
func (d *Dialer) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	r := d.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("egress: resolve %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("egress: %s has no address", host)
	}
	// The resolver hands IPv4 answers back in IPv4-mapped form; the
	// address connected to is the IPv4 one.
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	return addrs, nil
}

// control checks the address the socket is about to connect to.
func (d *Dialer) control(host string) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("egress: connect to %q: %w", address, err)
		}
		return Check(host, ap.Addr(), d.Permit)
	}
}

// Transport returns an HTTP transport that connects only through d and
// never through a proxy named in the environment.
func (d *Dialer) Transport() *http.Transport {
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            d.DialContext,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    15 * time.Second,
		ResponseHeaderTimeout:  60 * time.Second,
		MaxResponseHeaderBytes: maxHeaderBytes,
		MaxIdleConns:           8,
		IdleConnTimeout:        30 * time.Second,
	}
}
