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

// special are the IPv4 ranges beyond what netip's predicates name that
// are not public unicast (IANA's IPv4 special-purpose registry).
var special = []class{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT (shared)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4 relay anycast"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
}

// global6 is IPv6's global unicast space: every IPv6 address outside it
// (IPv4-compatible ::a.b.c.d, the discard prefix, local-use NAT64
// 64:ff9b:1::/48, site-local, ...) is refused, so that a range nobody
// listed here cannot lead to a host of the worker's own network.
var global6 = netip.MustParsePrefix("2000::/3")

// special6 are the ranges inside global6 that are not public unicast,
// or that embed an IPv4 address an attacker chooses.
var special6 = []class{
	{netip.MustParsePrefix("2001::/32"), "Teredo"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("2001:10::/28"), "ORCHID"},
	{netip.MustParsePrefix("2001:20::/28"), "ORCHIDv2"},
	{netip.MustParsePrefix("3fff::/20"), "documentation"},
}

// nat64 is the well-known NAT64 prefix: the IPv4 address in its last 32
// bits is judged.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// v4compat holds the deprecated IPv4-compatible IPv6 addresses
// (::a.b.c.d).
var v4compat = netip.MustParsePrefix("::/96")

// sixToFour is the 6to4 prefix: the IPv4 address in bits 16 to 47 is
// judged.
var sixToFour = netip.MustParsePrefix("2002::/16")

// classify returns why a is not a public unicast address, or "".
func classify(a netip.Addr) string {
	if a.Zone() != "" {
		return "scoped (zoned)"
	}
	if a.Is4In6() {
		return "IPv4-mapped IPv6"
	}
	b := a.As16()
	switch {
	case !a.IsValid():
		return "invalid"
	case nat64.Contains(a):
		if why := classify(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})); why != "" {
			return "NAT64 of a " + why
		}
		return ""
	case sixToFour.Contains(a):
		if why := classify(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})); why != "" {
			return "6to4 of a " + why
		}
		return ""
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
	if a.Is6() {
		if !global6.Contains(a) {
			if v4compat.Contains(a) {
				return "IPv4-compatible IPv6"
			}
			return "reserved (outside IPv6 global unicast)"
		}
		for _, c := range special6 {
			if c.prefix.Contains(a) {
				return c.why
			}
		}
		return ""
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
