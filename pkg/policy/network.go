package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"golang.org/x/net/idna"

	"github.com/toolgate/toolgate/pkg/tooldef"
)

// ErrEgressDenied is wrapped by every *EgressError: the network allowlist
// does not let the agent reach the host.
var ErrEgressDenied = errors.New("host not allowed by the network allowlist")

// EgressError says which host was refused and by which rule.
type EgressError struct {
	// Host and Port are what was asked for.
	Host string
	Port int
	// Rule is the id of the deny entry that matched, or "network.allow"
	// when no allow entry did.
	Rule string
}

// Error says what is wrong, for a person.
func (e *EgressError) Error() string {
	hp := e.Host + ":" + strconv.Itoa(e.Port)
	if e.Rule == "network.allow" {
		return fmt.Sprintf("%s is not in the policy's network allowlist (network.allow)", hp)
	}
	return fmt.Sprintf("%s is denied by %s", hp, e.Rule)
}

// Unwrap makes errors.Is(err, ErrEgressDenied) true.
func (e *EgressError) Unwrap() error { return ErrEgressDenied }

// hostPattern is one entry of network.allow or network.deny: a host name
// ("docs.python.org"), a wildcard for every subdomain ("*.github.com",
// which does not match github.com itself), "*" for every host, an IP
// address or an address range ("203.0.113.0/24"); optionally with ":PORT"
// or ":*". An allow entry without a port matches the web's ports, 80 and
// 443; a deny entry without a port, every port.
type hostPattern struct {
	id   string
	raw  string
	line int
	any  bool   // "*"
	host string // exact host, lower case, or the suffix after "*."
	// prefix is set for an address range ("203.0.113.0/24") and for an
	// address ("10.1.2.3", the /32): it is judged against the
	// addresses a name resolves to as well as addresses in URLs.
	prefix netip.Prefix
	wild   bool // "*.suffix"
	port   int  // 0: 80 and 443; -1: any
}

// Default ports of an entry written without one.
var webPorts = [2]int{80, 443}

// matchesPort reports whether h's port (80 and 443 when none is
// written) admits port.
func (h *hostPattern) matchesPort(port int) bool {
	switch {
	case h.port == 0:
		return port == webPorts[0] || port == webPorts[1]
	case h.port > 0:
		return port == h.port
	}
	return true
}

func (h *hostPattern) matches(host string, port int) bool {
	if !h.matchesPort(port) {
		return false
	}
	switch {
	case h.any:
		return true
	case h.wild:
		return strings.HasSuffix(host, "."+h.host)
	case h.prefix.IsValid():
		a, err := netip.ParseAddr(host)
		return err == nil && h.prefix.Contains(a.Unmap())
	}
	return host == h.host
}

// covers reports whether every host:port h matches is also matched by o
// (for the lint).
func (o *hostPattern) covers(h *hostPattern) bool {
	if o.port != -1 && o.port != h.port {
		return false
	}
	switch {
	case o.any:
		return true
	case h.any:
		return false
	case o.prefix.IsValid():
		return h.prefix.IsValid() && o.prefix.Bits() <= h.prefix.Bits() && o.prefix.Contains(h.prefix.Addr())
	case o.wild && h.wild:
		return h.host == o.host || strings.HasSuffix(h.host, "."+o.host)
	case o.wild:
		return strings.HasSuffix(h.host, "."+o.host)
	case h.wild:
		return false
	}
	return o.host == h.host
}

type network struct {
	allow []*hostPattern
	deny  []*hostPattern
}

// parseHostPattern reads one entry; the error says what is wrong.
func parseHostPattern(s string) (*hostPattern, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	h := &hostPattern{raw: s}
	if addr, port, ok := strings.Cut(s, "/"); ok && !strings.Contains(s, "://") {
		return parsePrefixPattern(h, addr, port)
	}
	if strings.Contains(s, "://") || strings.ContainsAny(s, "/?#@ \t") {
		return nil, fmt.Errorf("%q is not a host name: write the host alone (docs.python.org, *.github.com), not a URL", s)
	}
	host := s
	if strings.HasPrefix(s, "[") { // [IPv6] or [IPv6]:port
		end := strings.Index(s, "]")
		if end < 0 {
			return nil, fmt.Errorf("%q: unclosed [", s)
		}
		host = s[1:end]
		rest := s[end+1:]
		if rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return nil, fmt.Errorf("%q: expected :PORT after ]", s)
			}
			if err := h.setPort(rest[1:]); err != nil {
				return nil, fmt.Errorf("%q: %w", s, err)
			}
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() {
			return nil, fmt.Errorf("%q: [...] holds an IPv6 address", s)
		}
		h.setAddr(a)
		return h, nil
	}
	if i := strings.LastIndex(s, ":"); i >= 0 {
		if strings.Count(s, ":") > 1 {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("%q: an IPv6 address with a port is written [ADDRESS]:PORT", s)
			}
			h.setAddr(a)
			return h, nil
		}
		host = s[:i]
		if err := h.setPort(s[i+1:]); err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
	}
	switch {
	case host == "*":
		h.any = true
		return h, nil
	case strings.HasPrefix(host, "*."):
		h.wild = true
		host = host[2:]
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if h.wild {
			return nil, fmt.Errorf("%q: a wildcard applies to host names, not addresses", s)
		}
		h.setAddr(a)
		return h, nil
	}
	if err := checkHostName(host); err != nil {
		return nil, fmt.Errorf("%q: %w", s, err)
	}
	h.host = strings.TrimSuffix(host, ".") // the root's dot: the same name, as hosts are judged
	return h, nil
}

// setAddr makes h the entry of one address.
func (h *hostPattern) setAddr(a netip.Addr) {
	a = a.Unmap()
	h.host = a.String()
	h.prefix = netip.PrefixFrom(a, a.BitLen())
}

// parsePrefixPattern reads an address range, "203.0.113.0/24",
// "[2001:db8::/32]:443" or "2001:db8::/32"; before is what precedes the
// slash, after what follows it.
func parsePrefixPattern(h *hostPattern, before, after string) (*hostPattern, error) {
	s := h.raw
	bits, rest := after, ""
	switch {
	case strings.HasPrefix(before, "["):
		end := strings.Index(after, "]")
		if end < 0 {
			return nil, fmt.Errorf("%q: unclosed [", s)
		}
		before, bits, rest = before[1:], after[:end], after[end+1:]
		if rest != "" && !strings.HasPrefix(rest, ":") {
			return nil, fmt.Errorf("%q: expected :PORT after ]", s)
		}
	case !strings.Contains(before, ":"):
		bits, rest, _ = strings.Cut(after, ":")
		if rest != "" || strings.HasSuffix(after, ":") {
			rest = ":" + rest
		}
	}
	pfx, err := netip.ParsePrefix(before + "/" + bits)
	if err != nil {
		return nil, fmt.Errorf("%q is not a host name or an address range (203.0.113.0/24, [2001:db8::/32]): write the host alone, not a URL", s)
	}
	if rest != "" {
		if err := h.setPort(rest[1:]); err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
	}
	h.prefix = pfx.Masked()
	h.host = h.prefix.String()
	return h, nil
}

func (h *hostPattern) setPort(p string) error {
	if p == "*" {
		h.port = -1
		return nil
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("the port must be a number from 1 to 65535 or *, not %q", p)
	}
	h.port = n
	return nil
}

// checkHostName accepts DNS names: labels of letters, digits and hyphens
// (underscores too, as some real names have), no empty label, and no
// wildcard inside.
func checkHostName(h string) error {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return errors.New("empty or too long host name")
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return errors.New("empty or too long label in the host name")
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				if r == '*' {
					return errors.New("a wildcard is allowed only as the first label (*.example.com) or alone (*)")
				}
				return fmt.Errorf("character %q is not allowed in a host name", r)
			}
		}
	}
	return nil
}

// network decodes the network section of a layer.
func (d *decoder) network(n *yaml.Node, l *layer, at, id string) {
	for _, f := range d.fields(n, at) {
		name := join(at, f.raw)
		var list *[]*hostPattern
		switch f.key {
		case "allow":
			list = &l.network.allow
		case "deny":
			list = &l.network.deny
		default:
			d.errf(f.kn, name, "unknown field (expected allow or deny)")
			continue
		}
		for i, c := range d.strings(f.value, name) {
			h, err := parseHostPattern(c.Value)
			if err != nil {
				d.errf(c, fmt.Sprintf("%s[%d]", name, i), "%v", err)
				continue
			}
			if f.key == "deny" && h.port == 0 {
				h.port = -1 // deny wins: a deny entry without a port holds for every port
			}
			h.id, h.line = fmt.Sprintf("%s.%s[%d]", id, f.raw, i), c.Line
			*list = append(*list, h)
		}
	}
}

// lintNetwork warns of allow entries a deny entry always overrides.
func (d *decoder) lintNetwork(p *Policy) {
	layers := []*layer{p.base}
	for _, o := range p.agents {
		layers = append(layers, o.layer)
	}
	for _, l := range layers {
		denying := [][]*hostPattern{p.base.network.deny}
		if l != p.base {
			denying = append(denying, l.network.deny)
		}
		for _, a := range l.network.allow {
			for _, list := range denying {
				for _, de := range list {
					if de.covers(a) {
						d.warnf(a.line, a.id, "never takes effect: %s denies %s (deny wins)", de.id, a.raw)
					}
				}
			}
		}
	}
}

// Egress is the network allowlist in force for one agent: the network
// sections of the base policy and of every agent overlay that matches,
// together. Deny wins; a host no allow entry matches is refused. It is
// what the web tools and the filtering proxy in front of bash's sandbox
// judge every host (and every redirect) by; addresses are judged after
// DNS resolution by the dialer (internal/egress).
type Egress struct {
	revision string
	allow    []*hostPattern
	deny     []*hostPattern
}

// Egress returns the network allowlist in force for agent, with the
// policy in force now.
func (g *Gate) Egress(agent string) *Egress {
	p := g.pol.Load()
	return egressOf(p.revision, p.layersFor(agent))
}

// egressOf joins the network sections of layers: the one place an
// allowlist is assembled, for the tools (Gate.Egress) and the gate's own
// judgement of a network tool's url alike.
func egressOf(revision string, layers []*layer) *Egress {
	e := &Egress{revision: revision}
	for _, l := range layers {
		e.allow = append(e.allow, l.network.allow...)
		e.deny = append(e.deny, l.network.deny...)
	}
	return e
}

// Check returns nil when the allowlist lets the agent reach host:port,
// else an *EgressError. host is a name or an IP address (IPv6 with or
// without brackets); names are compared without case and trailing dot.
func (e *Egress) Check(host string, port int) error {
	h := strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if a, err := netip.ParseAddr(h); err == nil {
		h = a.Unmap().String()
	} else {
		if !isASCII(h) {
			// An internationalised name is judged as the name looked up
			// and connected to: its ASCII form (what net/http dials).
			if h, err = idna.Lookup.ToASCII(h); err != nil {
				return &EgressError{Host: host, Port: port, Rule: "network.allow"}
			}
		}
		if checkHostName(h) != nil {
			// Only a host name is judged (and then looked up): not an
			// empty label (".example.com" would end like
			// "*.example.com"), nor a character DNS names do not have.
			return &EgressError{Host: host, Port: port, Rule: "network.allow"}
		}
	}
	for _, d := range e.deny {
		if d.matches(h, port) {
			return &EgressError{Host: host, Port: port, Rule: d.id}
		}
	}
	for _, a := range e.allow {
		if a.matches(h, port) {
			return nil
		}
	}
	return &EgressError{Host: host, Port: port, Rule: "network.allow"}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// CheckAddr judges an address a host name resolved to (the dialer asks,
// for every address, before it connects) against the deny entries that
// are addresses or address ranges: a name cannot lead to an address the
// policy denies. It returns nil or an *EgressError naming the entry.
func (e *Egress) CheckAddr(a netip.Addr, port int) error {
	a = a.Unmap()
	for _, d := range e.deny {
		if d.prefix.IsValid() && d.matchesPort(port) && d.prefix.Contains(a) {
			return &EgressError{Host: a.String(), Port: port, Rule: d.id}
		}
	}
	return nil
}

// CheckURL judges a URL's host and port (80 for http, 443 for https when
// none is written). Only http and https are accepted.
func (e *Egress) CheckURL(raw string) error {
	host, port, err := URLHostPort(raw)
	if err != nil {
		return err
	}
	return e.Check(host, port)
}

// URLHostPort returns the host and port an http or https URL names; an
// error says why the URL cannot be fetched.
func URLHostPort(raw string) (string, int, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", 0, fmt.Errorf("not a URL: %w", err)
	}
	port := 0
	switch strings.ToLower(u.Scheme) {
	case "http":
		port = 80
	case "https":
		port = 443
	default:
		return "", 0, fmt.Errorf("URL scheme %q is not http or https", u.Scheme)
	}
	if u.User != nil {
		return "", 0, errors.New("URLs with a user name or password are refused")
	}
	host := u.Hostname()
	if host == "" {
		return "", 0, errors.New("the URL has no host")
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return "", 0, fmt.Errorf("bad port %q in the URL", p)
		}
		port = n
	}
	return host, port, nil
}

// networkTool judges the url argument of a network tool against the
// agent's allowlist, so that a host the policy never lets the agent reach
// is denied before anyone is asked.
func (e *evaluation) networkTool() {
	arg := "url" // a network tool that is not built in: its url argument, if any
	if d, ok := tooldef.Lookup(e.tool); ok {
		a := d.Arg(tooldef.URL)
		if a == nil {
			return
		}
		arg = a.Name
	}
	raw, ok := e.req.Arguments[arg].(string)
	if !ok {
		return
	}
	host, port, err := URLHostPort(raw)
	if err != nil {
		e.deny("builtin.network.url", "url: "+err.Error(), raw)
		return
	}
	if err := egressOf(e.p.revision, e.layers).Check(host, port); err != nil {
		var ee *EgressError
		errors.As(err, &ee)
		e.deny(ee.Rule, err.Error(), raw)
	}
}
