package testenv

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// DNS is a real DNS server on a random loopback UDP port answering A and
// AAAA queries from a fixed table, so tests take the resolver's real
// path (the wire protocol, the Go resolver) to names of their choosing.
type DNS struct {
	// Addr is the server's address.
	Addr    string
	pc      net.PacketConn
	mu      sync.Mutex
	names   map[string][]netip.Addr
	queries atomic.Int64
}

// StartDNS starts a DNS server answering for names (without or with the
// trailing dot); other names get NXDOMAIN. It stops when the test ends.
func StartDNS(t testing.TB, names map[string][]netip.Addr) *DNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("dns: %v", err)
	}
	d := &DNS{Addr: pc.LocalAddr().String(), pc: pc, names: map[string][]netip.Addr{}}
	for n, as := range names {
		d.names[strings.ToLower(strings.TrimSuffix(n, "."))+"."] = as
	}
	done := make(chan struct{})
	go func() { defer close(done); d.serve() }()
	t.Cleanup(func() { pc.Close(); Recv(t, done, "done") })
	return d
}

// Set replaces the addresses of name.
func (d *DNS) Set(name string, as ...netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.names[strings.ToLower(strings.TrimSuffix(name, "."))+"."] = as
}

// Queries is how many questions the server has answered.
func (d *DNS) Queries() int64 { return d.queries.Load() }

// Resolver returns a Go resolver that asks only this server.
func (d *DNS) Resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var nd net.Dialer
		return nd.DialContext(ctx, "udp", d.Addr)
	}}
}

func (d *DNS) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := d.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		d.queries.Add(1)
		d.mu.Lock()
		as, known := d.names[strings.ToLower(q.Name.String())]
		d.mu.Unlock()
		rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
		if !known {
			rh.RCode = dnsmessage.RCodeNameError
		}
		b := dnsmessage.NewBuilder(nil, rh)
		b.EnableCompression()
		b.StartQuestions()
		b.Question(q)
		b.StartAnswers()
		for _, a := range as {
			rrh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}
			switch {
			case q.Type == dnsmessage.TypeA && a.Is4():
				b.AResource(rrh, dnsmessage.AResource{A: a.As4()})
			case q.Type == dnsmessage.TypeAAAA && a.Is6():
				b.AAAAResource(rrh, dnsmessage.AAAAResource{AAAA: a.As16()})
			}
		}
		msg, err := b.Finish()
		if err != nil {
			continue
		}
		d.pc.WriteTo(msg, from)
	}
}
