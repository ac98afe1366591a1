package policy

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestEgressCheck(t *testing.T) {
	doc := `
network:
  allow: ["docs.python.org", "*.github.com", "pypi.org:8443", "10.1.2.3", "[2001:db8::1]:*", "api.example.com:*", "xn--bcher-kva.example", "kube.example", "*.wide.example:*"]
  deny: ["evil.github.com", "203.0.113.0/24", "[2001:db8:1::/48]", "bad.wide.example", "fqdn.wide.example.", "*.sub.wide.example."]
agents:
  "ci-*":
    network:
      allow: ["*"]
      deny: ["*.internal.example"]
`
	p, warns, err := Parse([]byte(doc), "net.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 0 {
		t.Fatalf("warnings: %v", warns)
	}
	g := NewGate(p)
	for _, tc := range []struct {
		agent, host string
		port        int
		rule        string // "" = allowed
	}{
		{"a", "docs.python.org", 443, ""},
		{"a", "DOCS.Python.org.", 80, ""},
		{"a", "docs.python.org", 8080, "network.allow"},
		{"a", "python.org", 443, "network.allow"},
		{"a", "api.github.com", 443, ""},
		{"a", "raw.objects.github.com", 443, ""},
		{"a", "github.com", 443, "network.allow"},
		{"a", "evil.github.com", 443, "network.deny[0]"},
		{"a", "pypi.org", 8443, ""},
		{"a", "pypi.org", 443, "network.allow"},
		{"a", "10.1.2.3", 80, ""},
		{"a", "::ffff:10.1.2.3", 80, ""},
		{"a", "[2001:db8::1]", 22, ""},
		{"a", "api.example.com", 5432, ""},
		{"a", "example.org", 443, "network.allow"},
		{"ci-7", "example.org", 443, ""},
		{"ci-7", "example.org", 22, "network.allow"},
		{"ci-7", "db.internal.example", 443, "agents.ci-*.network.deny[0]"},
		{"ci-7", "evil.github.com", 443, "network.deny[0]"},
		// Strings that are not host names are never judged as one.
		{"a", ".github.com", 443, "network.allow"},
		{"a", "x..github.com", 443, "network.allow"},
		{"a", "*.github.com", 443, "network.allow"},
		{"a", "api.github.com%2e", 443, "network.allow"},
		{"a", "api.github.com\\", 443, "network.allow"},
		{"a", "api.github.com ", 443, "network.allow"},
		{"a", "docs.python.org..", 443, "network.allow"},
		// Internationalised names are judged in the ASCII form dialed.
		{"a", "bücher.example", 443, ""},
		{"a", "BÜCHER.example", 443, ""},
		{"a", "\u212Aube.example", 443, ""}, // KELVIN SIGN: the name dialed is kube.example
		{"a", "bucher.example", 443, "network.allow"},
		// A deny entry without a port holds for every port.
		{"ci-7", "bad.wide.example", 8080, "network.deny[3]"},
		{"a", "bad.wide.example", 8080, "network.deny[3]"},
		{"a", "ok.wide.example", 8080, ""},
		// An entry written with the root's trailing dot is the same name.
		{"a", "fqdn.wide.example", 443, "network.deny[4]"},
		{"a", "FQDN.wide.example.", 443, "network.deny[4]"},
		{"a", "x.sub.wide.example", 443, "network.deny[5]"},
		// Address ranges.
		{"ci-7", "203.0.113.9", 443, "network.deny[1]"},
		{"ci-7", "::ffff:203.0.113.9", 22, "network.deny[1]"},
		{"ci-7", "2001:db8:1::5", 443, "network.deny[2]"},
		{"ci-7", "2001:db8:2::5", 443, ""},
	} {
		err := g.Egress(tc.agent).Check(tc.host, tc.port)
		if tc.rule == "" {
			if err != nil {
				t.Errorf("%s → %s:%d: %v, want allowed", tc.agent, tc.host, tc.port, err)
			}
			continue
		}
		var ee *EgressError
		if !errors.As(err, &ee) || !errors.Is(err, ErrEgressDenied) || ee.Rule != tc.rule {
			t.Errorf("%s → %s:%d: %v, want denied by %s", tc.agent, tc.host, tc.port, err, tc.rule)
		}
	}
}

// CheckAddr holds the deny entries that are addresses or ranges against
// the addresses names resolve to.
func TestEgressCheckAddr(t *testing.T) {
	p, _, err := Parse([]byte("network:\n  allow: [\"*:*\", \"198.51.100.7\"]\n  deny: [\"203.0.113.0/24\", \"192.0.2.1:22\", \"[2001:db8::/32]:*\", \"deny.example\"]\n"), "p")
	if err != nil {
		t.Fatal(err)
	}
	eg := NewGate(p).Egress("a")
	for _, tc := range []struct {
		addr string
		port int
		rule string
	}{
		{"203.0.113.200", 443, "network.deny[0]"},
		{"203.0.113.200", 5432, "network.deny[0]"},
		{"::ffff:203.0.113.200", 80, "network.deny[0]"},
		{"192.0.2.1", 22, "network.deny[1]"},
		{"192.0.2.1", 443, ""},
		{"2001:db8:5::1", 443, "network.deny[2]"},
		{"198.51.100.7", 443, ""}, // allow entries do not open addresses
		{"93.184.215.14", 443, ""},
	} {
		err := eg.CheckAddr(netip.MustParseAddr(tc.addr), tc.port)
		var ee *EgressError
		switch {
		case tc.rule == "" && err != nil:
			t.Errorf("%s:%d: %v, want nil", tc.addr, tc.port, err)
		case tc.rule != "" && (!errors.As(err, &ee) || ee.Rule != tc.rule):
			t.Errorf("%s:%d: %v, want denied by %s", tc.addr, tc.port, err, tc.rule)
		}
	}
}

func TestEgressNoSectionRefusesAll(t *testing.T) {
	p, _, err := Parse([]byte("default: allow\n"), "p")
	if err != nil {
		t.Fatal(err)
	}
	err = NewGate(p).Egress("a").Check("docs.python.org", 443)
	if !errors.Is(err, ErrEgressDenied) || !strings.Contains(err.Error(), "network.allow") {
		t.Fatalf("got %v, want a refusal naming network.allow", err)
	}
}

func TestNetworkParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, doc, field, msg string
		line                  int
	}{
		{"url", "network:\n  allow: [\"https://docs.python.org/3\"]\n", "network.allow[0]", "not a host name", 2},
		{"inner wildcard", "network:\n  allow:\n    - ok.example\n    - a.*.example\n", "network.allow[1]", "wildcard", 4},
		{"bad port", "network:\n  deny: [\"x.example:70000\"]\n", "network.deny[0]", "port", 2},
		{"unknown key", "network:\n  alow: [x.example]\n", "network.alow", "expected allow or deny", 2},
		{"not a list", "network:\n  allow: x.example\n", "network.allow", "must be a list", 2},
		{"wildcard address", "network:\n  allow: [\"*.10.0.0.1\"]\n", "network.allow[0]", "not addresses", 2},
		{"bad range", "network:\n  deny: [\"10.0.0.0/33\"]\n", "network.deny[0]", "address range", 2},
		{"path", "network:\n  deny: [\"x.example/path\"]\n", "network.deny[0]", "not a URL", 2},
		{"in agent", "agents:\n  a:\n    network:\n      allow: [\"bad host\"]\n", "agents.a.network.allow[0]", "not a host name", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse([]byte(tc.doc), "p.yaml")
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("got %v, want a ParseError", err)
			}
			pr := pe.Problems[0]
			if pr.Field != tc.field || pr.Line != tc.line || !strings.Contains(pr.Message, tc.msg) {
				t.Fatalf("got %+v, want line %d field %s message containing %q", pr, tc.line, tc.field, tc.msg)
			}
		})
	}
}

func TestNetworkLint(t *testing.T) {
	doc := "network:\n  allow: [\"api.github.com\", \"docs.python.org\"]\n  deny: [\"*.github.com\"]\n"
	_, warns, err := Parse([]byte(doc), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 1 || warns[0].Field != "network.allow[0]" || warns[0].Line != 2 || !strings.Contains(warns[0].Message, "never takes effect") {
		t.Fatalf("warnings %v, want one on network.allow[0]", warns)
	}
}

// The gate judges a network tool's url before anyone is asked.
func TestNetworkToolURL(t *testing.T) {
	doc := "kinds: {network: allow}\nnetwork: {allow: [\"docs.python.org\"]}\n"
	p, _, err := Parse([]byte(doc), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g := NewGate(p)
	for _, tc := range []struct {
		url    string
		action Action
		rule   string
	}{
		{"https://docs.python.org/3/library/", Allow, "kinds.network.action"},
		{"https://evil.example/", Deny, "network.allow"},
		{"gopher://docs.python.org/", Deny, "builtin.network.url"},
		{"https://user:pw@docs.python.org/", Deny, "builtin.network.url"},
	} {
		d := g.Evaluate(context.Background(), Request{Agent: "a", Tool: "web_fetch", Known: true, Kind: KindNetwork,
			Arguments: map[string]any{"url": tc.url}})
		if d.Action != tc.action || d.Rule != tc.rule {
			t.Errorf("%s: got %s by %s (%s), want %s by %s", tc.url, d.Action, d.Rule, d.Reason, tc.action, tc.rule)
		}
	}
}

// FuzzHostPattern: any entry either parses into a pattern that matches
// consistently or is refused with an error; it never panics.
func FuzzHostPattern(f *testing.F) {
	for _, s := range []string{"docs.python.org", "*.github.com", "*", "[::1]:443", "10.0.0.1:*", "a.*.b", "x:0", "[fe80::1%eth0]", "203.0.113.0/24", "[2001:db8::/32]:*"} {
		f.Add(s, "docs.python.org", 443)
	}
	f.Fuzz(func(t *testing.T, entry, host string, port int) {
		h, err := parseHostPattern(entry)
		if err != nil {
			return
		}
		e := &Egress{allow: []*hostPattern{h}}
		if h.covers(h) != true {
			t.Fatalf("%q does not cover itself", entry)
		}
		_ = e.Check(host, port)
	})
}

// FuzzHostPatternOwnHost: any entry is read or refused without panicking; an
// entry that is read matches its own host (an address range its own
// first address), and an address range never matches a host name.
func FuzzHostPatternOwnHost(f *testing.F) {
	for _, s := range []string{"docs.python.org", "*.github.com", "*", "10.1.2.3:*", "[2001:db8::1]:443", "203.0.113.0/24",
		"[2001:db8::/32]:*", "2001:db8::/32", "10.0.0.0/8:22", "x/y", "[::1", "a..b", "*.1.2.3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := parseHostPattern(s)
		if err != nil {
			return
		}
		port := 443
		if h.port > 0 {
			port = h.port
		}
		switch {
		case h.any || h.wild:
		case h.prefix.IsValid():
			if !h.matches(h.prefix.Addr().String(), port) {
				t.Fatalf("%q (%s) does not match its own address", s, h.prefix)
			}
			if h.matches("example.com", port) {
				t.Fatalf("%q matches a host name", s)
			}
		default:
			if !h.matches(h.host, port) {
				t.Fatalf("%q does not match its own host %q", s, h.host)
			}
		}
	})
}
