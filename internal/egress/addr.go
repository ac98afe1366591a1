// Package egress is toolgate's control of outbound connections: a dialer
// that judges every host against the policy's network allowlist and every
// address after DNS resolution, at the moment of connecting (so a name
// that resolves to a private address, or rebinds to one, is refused), the
// filtering HTTP/HTTPS proxy that bash commands granted the network reach
// it through, and the relay that carries the sandbox's loopback port to
// that proxy.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrForbiddenAddress is wrapped by every *AddressError: the address is
// not a public unicast address of the internet.
var ErrForbiddenAddress = errors.New("address not reachable from toolgate")

// AddressError names the host, the address it resolved to and why that
// address is refused.
type AddressError struct {
	// Host is the name (or address) asked for.
	Host string
	// Addr is the address refused.
	Addr netip.Addr
	// Why names the class of the address (loopback, private, ...).
	Why string
}

// Error says what is wrong, for a person.
func (e *AddressError) Error() string {
	if e.Host == "" || e.Host == e.Addr.String() {
		return fmt.Sprintf("connection to %s refused: %s address", e.Addr, e.Why)
	}
	return fmt.Sprintf("connection to %s refused: it resolves to %s (%s address)", e.Host, e.Addr, e.Why)
}

// Unwrap makes errors.Is(err, ErrForbiddenAddress) true.
func (e *AddressError) Unwrap() error { return ErrForbiddenAddress }

// metadata are the cloud instance-metadata addresses: refused even where
// a Dialer permits the range they lie in.
var metadata = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack, ...
	netip.MustParseAddr("fd00:ec2::254"),   // AWS over IPv6
	netip.MustParseAddr("169.254.170.2"),   // AWS ECS task metadata
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
}

type class struct {
	prefix netip.Prefix
	why    string
}

// special are the ranges beyond what netip's predicates name that are
// not public unicast (IANA special-purpose registries).
var special = []class{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT (shared)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("100::/64"), "discard-only"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
}

// nat64 is the well-known NAT64 prefix: the IPv4 address in its last 32
// bits is judged.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// classify returns why a is not a public unicast address, or "".
func classify(a netip.Addr) string {
	if a.Zone() != "" {
		return "scoped (zoned)"
	}
	if a.Is4In6() {
		return "IPv4-mapped IPv6"
	}
	if nat64.Contains(a) {
		b := a.As16()
		v4 := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		if why := classify(v4); why != "" {
			return "NAT64 of a " + why
		}
		return ""
	}
	switch {
	case !a.IsValid():
		return "invalid"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsPrivate():
		return "private"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast(), a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast():
		return "multicast"
	}
	for _, c := range special {
		if c.prefix.Contains(a) {
			return c.why
		}
	}
	return ""
}

// isMetadata reports whether a is a cloud metadata address.
func isMetadata(a netip.Addr) bool {
	for _, m := range metadata {
		if a == m {
			return true
		}
	}
	return false
}

// Check returns nil for a public unicast address and an *AddressError
// otherwise: loopback, private (RFC 1918, unique local), link-local,
// carrier-grade NAT, multicast, unspecified, reserved, IPv4-mapped IPv6,
// and the cloud metadata addresses. permit lists prefixes allowed anyway
// (never the metadata addresses).
func Check(host string, a netip.Addr, permit []netip.Prefix) error {
	if isMetadata(a) || isMetadata(a.Unmap()) {
		return &AddressError{Host: host, Addr: a, Why: "cloud metadata"}
	}
	why := classify(a)
	if why == "" {
		return nil
	}
	for _, p := range permit {
		if p.Contains(a) {
			return nil
		}
	}
	return &AddressError{Host: host, Addr: a, Why: why}
}
