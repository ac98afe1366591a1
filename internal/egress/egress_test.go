package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		addr string
		why  string // "" = public
	}{
		{"93.184.215.14", ""},
		{"2606:4700::6810:84e5", ""},
		{"127.0.0.1", "loopback"},
		{"127.8.9.10", "loopback"},
		{"::1", "loopback"},
		{"10.1.2.3", "private"},
		{"172.16.0.1", "private"},
		{"192.168.1.1", "private"},
		{"fd12::1", "private"},
		{"169.254.1.1", "link-local"},
		{"fe80::1", "link-local"},
		{"100.64.0.1", "carrier-grade NAT (shared)"},
		{"224.0.0.1", "multicast"},
		{"ff02::1", "multicast"},
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"0.1.2.3", "this-network"},
		{"::ffff:127.0.0.1", "IPv4-mapped IPv6"},
		{"::ffff:93.184.215.14", "IPv4-mapped IPv6"},
		{"64:ff9b::a00:1", "NAT64 of a private"},
		{"64:ff9b::5db8:d70e", ""},
		{"169.254.169.254", "cloud metadata"},
		{"fd00:ec2::254", "cloud metadata"},
		{"100.100.100.200", "cloud metadata"},
		{"255.255.255.255", "broadcast"},
		{"240.1.2.3", "reserved"},
		{"192.0.2.1", "documentation"},
		{"192.88.99.1", "6to4 relay anycast"},
		// IPv6 that embeds or leads to an IPv4 address of the host's own.
		{"::127.0.0.1", "IPv4-compatible IPv6"},
		{"::a00:1", "IPv4-compatible IPv6"},
		{"2002:7f00:1::", "6to4 of a loopback"},
		{"2002:a9fe:a9fe::1", "6to4 of a link-local"},
		{"2002:5db8:d70e::1", ""},
		{"2001:0:7f00:1::", "Teredo"},
		{"64:ff9b:1::7f00:1", "reserved (outside IPv6 global unicast)"},
		{"64:ff9b::7f00:1", "NAT64 of a loopback"},
		{"100::1", "reserved (outside IPv6 global unicast)"},
		{"fec0::1", "reserved (outside IPv6 global unicast)"},
		{"4000::1", "reserved (outside IPv6 global unicast)"},
		{"2001:db8::1", "documentation"},
	} {
		err := Check("h", netip.MustParseAddr(tc.addr), nil)
		var ae *AddressError
		switch {
		case tc.why == "" && err != nil:
			t.Errorf("%s: %v, want allowed", tc.addr, err)
		case tc.why != "" && (!errors.As(err, &ae) || ae.Why != tc.why || !errors.Is(err, ErrForbiddenAddress)):
			t.Errorf("%s: %v, want refused as %s", tc.addr, err, tc.why)
		}
	}
	// Permit opens a range, never the metadata addresses.
	permit := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("169.254.0.0/16")}
	if err := Check("h", netip.MustParseAddr("127.0.0.1"), permit); err != nil {
		t.Errorf("permitted loopback: %v", err)
	}
	if err := Check("h", netip.MustParseAddr("169.254.169.254"), permit); !errors.Is(err, ErrForbiddenAddress) {
		t.Errorf("metadata in a permitted range: %v, want refused", err)
	}
}

// counted is an HTTP test server that counts the requests it received.
type counted struct {
	*httptest.Server
	hits atomic.Int64
}

func newCounted(t *testing.T, tlsServer bool) *counted {
	c := &counted{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.hits.Add(1)
		io.WriteString(w, "hello from "+r.Host)
	})
	if tlsServer {
		c.Server = httptest.NewTLSServer(h)
	} else {
		c.Server = httptest.NewServer(h)
	}
	t.Cleanup(c.Close)
	return c
}

func (c *counted) port(t *testing.T) int {
	u, _ := url.Parse(c.URL)
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func allowOnly(names ...string) func(string, int) error {
	src := "network:\n  allow:\n"
	for _, n := range names {
		src += "    - \"" + n + "\"\n"
	}
	p, _, err := policy.Parse([]byte(src), "test")
	if err != nil {
		panic(err)
	}
	return policy.NewGate(p).Egress("agent").Check
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// A name that resolves to a loopback address is refused after the real
// DNS lookup, and the server behind it never sees a request; the same
// dial with loopback permitted (what tests do) reaches it.
func TestDialerRefusesPrivateAfterResolution(t *testing.T) {
	srv := newCounted(t, false)
	dns := testenv.StartDNS(t, map[string][]netip.Addr{"rebind.test": {netip.MustParseAddr("127.0.0.1")}})
	port := srv.port(t)
	allow := allowOnly("rebind.test:*")
	target := "rebind.test:" + strconv.Itoa(port)

	d := &Dialer{Allow: allow, Resolver: dns.Resolver()}
	c, err := d.DialContext(context.Background(), "tcp", target)
	var ae *AddressError
	if !errors.As(err, &ae) || ae.Why != "loopback" || ae.Host != "rebind.test" {
		t.Fatalf("dial %s: conn %v, err %v; want refused as loopback", target, c, err)
	}
	if dns.Queries() == 0 {
		t.Fatal("the refusal came before any DNS lookup: the test proves nothing")
	}
	client := &http.Client{Transport: d.Transport()}
	if _, err := client.Get("http://" + target + "/"); !errors.Is(err, ErrForbiddenAddress) {
		t.Fatalf("GET through the dialer: %v, want ErrForbiddenAddress", err)
	}
	if n := srv.hits.Load(); n != 0 {
		t.Fatalf("the server received %d requests, want 0", n)
	}

	permitted := &Dialer{Allow: allow, Resolver: dns.Resolver(), Permit: loopback}
	res, err := (&http.Client{Transport: permitted.Transport()}).Get("http://" + target + "/")
	if err != nil {
		t.Fatalf("permitted GET: %v", err)
	}
	res.Body.Close()
	if n := srv.hits.Load(); n != 1 {
		t.Fatalf("the server received %d requests, want 1", n)
	}
}

// The name rebinds between lookups: whatever the answer at dial time,
// the address connected to is the one judged.
func TestDialerRebinding(t *testing.T) {
	srv := newCounted(t, false)
	dns := testenv.StartDNS(t, map[string][]netip.Addr{"flip.test": {netip.MustParseAddr("127.0.0.1")}})
	target := "flip.test:" + strconv.Itoa(srv.port(t))
	// Only 127.0.0.2 is permitted: the first answer (127.0.0.2) passes,
	// the rebound one (127.0.0.1) must not.
	d := &Dialer{Allow: allowOnly("flip.test:*"), Resolver: dns.Resolver(), Permit: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}
	dns.Set("flip.test", netip.MustParseAddr("127.0.0.2"))
	c, err := d.DialContext(context.Background(), "tcp", target)
	if err == nil {
		c.Close()
	} else if errors.Is(err, ErrForbiddenAddress) { // nothing listens on 127.0.0.2: refused by the kernel, not by the check
		t.Fatalf("first answer refused: %v", err)
	}
	dns.Set("flip.test", netip.MustParseAddr("127.0.0.1"))
	if _, err := d.DialContext(context.Background(), "tcp", target); !errors.Is(err, ErrForbiddenAddress) {
		t.Fatalf("rebound to 127.0.0.1: %v, want ErrForbiddenAddress", err)
	}
	if n := srv.hits.Load(); n != 0 {
		t.Fatalf("the server received %d requests, want 0", n)
	}
}

// A host outside the allowlist is refused before any DNS lookup.
func TestDialerAllowlistFirst(t *testing.T) {
	dns := testenv.StartDNS(t, map[string][]netip.Addr{"other.test": {netip.MustParseAddr("93.184.215.14")}})
	d := &Dialer{Allow: allowOnly("docs.python.org"), Resolver: dns.Resolver()}
	_, err := d.DialContext(context.Background(), "tcp", "other.test:443")
	if !errors.Is(err, policy.ErrEgressDenied) {
		t.Fatalf("got %v, want ErrEgressDenied", err)
	}
	if _, err := (&Dialer{}).DialContext(context.Background(), "tcp", "docs.python.org:443"); !errors.Is(err, ErrNoAllowlist) {
		t.Fatalf("zero Dialer: %v, want ErrNoAllowlist", err)
	}
	if _, err := d.DialContext(context.Background(), "udp", "docs.python.org:53"); err == nil {
		t.Fatal("udp dialed")
	}
	if q := dns.Queries(); q != 0 {
		t.Fatalf("%d DNS queries for refused hosts, want 0", q)
	}
}

// The proxy on its unix socket: plain http forwarded and https tunnelled
// to allowed names only; every other host, and addresses, refused with a
// 403 — the servers' request counts prove what reached them.
func TestProxy(t *testing.T) {
	plain := newCounted(t, false)
	secure := newCounted(t, true)
	other := newCounted(t, false)
	lo := netip.MustParseAddr("127.0.0.1")
	dns := testenv.StartDNS(t, map[string][]netip.Addr{"allowed.test": {lo}, "other.test": {lo}})
	p := &Proxy{Dialer: &Dialer{Allow: allowOnly("allowed.test:*"), Resolver: dns.Resolver(), Permit: loopback}}
	sock, err := ListenUnix(p, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	pool := secure.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	client := &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "unix", sock.Path)
		},
		// httptest's certificate names example.com; the name checked is
		// not what this test is about.
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"},
	}}
	get := func(u string) (int, string) {
		t.Helper()
		res, err := client.Get(u)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get("http://allowed.test:" + strconv.Itoa(plain.port(t)) + "/x"); code != 200 || !strings.Contains(body, "hello from allowed.test") {
		t.Fatalf("http via proxy: %d %q", code, body)
	}
	if code, body := get("https://allowed.test:" + strconv.Itoa(secure.port(t)) + "/x"); code != 200 || !strings.Contains(body, "hello") {
		t.Fatalf("https via CONNECT: %d %q", code, body)
	}
	for _, u := range []string{
		"http://other.test:" + strconv.Itoa(other.port(t)) + "/",
		"https://other.test:" + strconv.Itoa(other.port(t)) + "/",
		"http://127.0.0.1:" + strconv.Itoa(other.port(t)) + "/",
		"https://127.0.0.1:" + strconv.Itoa(other.port(t)) + "/",
	} {
		code, body := get(u)
		if code == 200 || !(code == 403 || strings.Contains(body, "Forbidden")) {
			t.Errorf("%s: %d %q, want refused", u, code, body)
		}
	}
	if plain.hits.Load() != 1 || secure.hits.Load() != 1 || other.hits.Load() != 0 {
		t.Fatalf("requests received: allowed http %d, allowed https %d, other %d; want 1, 1, 0",
			plain.hits.Load(), secure.hits.Load(), other.hits.Load())
	}
}

// Requests written by hand to the proxy's socket, where what is judged
// and what is reached could differ: the absolute URL's host against the
// Host header, CONNECT's authority against its Host header, a request
// smuggled after a body whose length is given twice, and another host
// asked for inside a tunnel. The server outside the allowlist never sees
// a request; what reaches the allowed one says which host it was.
func TestProxyRawRequests(t *testing.T) {
	allowed := newCounted(t, false)
	other := newCounted(t, false)
	lo := netip.MustParseAddr("127.0.0.1")
	dns := testenv.StartDNS(t, map[string][]netip.Addr{"allowed.test": {lo}, "other.test": {lo}})
	p := &Proxy{Dialer: &Dialer{Allow: allowOnly("allowed.test:" + strconv.Itoa(allowed.port(t))), Resolver: dns.Resolver(), Permit: loopback}}
	sock, err := ListenUnix(p, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	a := "allowed.test:" + strconv.Itoa(allowed.port(t))
	o := "other.test:" + strconv.Itoa(other.port(t))
	oAddr := "127.0.0.1:" + strconv.Itoa(other.port(t))
	for _, tc := range []struct {
		name, req string
		reached   int64 // requests the allowed server gets
		want      string
	}{
		{"absolute URL allowed, Host header other",
			"GET http://" + a + "/ HTTP/1.1\r\nHost: " + o + "\r\nConnection: close\r\n\r\n", 1, "hello from " + a},
		{"absolute URL other, Host header allowed",
			"GET http://" + o + "/ HTTP/1.1\r\nHost: " + a + "\r\nConnection: close\r\n\r\n", 0, "403"},
		{"absolute URL with the allowed host as user name",
			"GET http://" + a + "@" + o + "/ HTTP/1.1\r\nHost: " + a + "\r\nConnection: close\r\n\r\n", 0, "40"},
		{"CONNECT other, Host header allowed",
			"CONNECT " + o + " HTTP/1.1\r\nHost: " + a + "\r\nConnection: close\r\n\r\n", 0, "403"},
		{"CONNECT in path form, Host header other",
			"CONNECT /" + o + " HTTP/1.1\r\nHost: " + o + "\r\nConnection: close\r\n\r\n", 0, "40"},
		{"CONNECT to the allowed host, then a request for another inside",
			"CONNECT " + a + " HTTP/1.1\r\nHost: " + a + "\r\n\r\nGET http://" + o + "/ HTTP/1.1\r\nHost: " + o + "\r\nConnection: close\r\n\r\n", 1, "hello from " + o},
		{"a request smuggled after a body with Content-Length and Transfer-Encoding",
			"POST http://" + a + "/ HTTP/1.1\r\nHost: " + a + "\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
				"GET http://" + o + "/ HTTP/1.1\r\nHost: " + o + "\r\nConnection: close\r\n\r\n", 1, ""},
		{"a request smuggled in the body", "POST http://" + a + "/ HTTP/1.1\r\nHost: " + a + "\r\nContent-Length: 60\r\nConnection: close\r\n\r\n" +
			"GET / HTTP/1.1\r\nHost: " + oAddr + "\r\nX: " + strings.Repeat("x", 60-30-len(oAddr)) + "\r\n\r\n", 1, "hello from " + a},
		{"the address of the other server", "GET http://" + oAddr + "/ HTTP/1.1\r\nHost: " + a + "\r\nConnection: close\r\n\r\n", 0, "403"},
	} {
		before := allowed.hits.Load()
		c, err := net.Dial("unix", sock.Path)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, tc.req)
		got, _ := io.ReadAll(c)
		c.Close()
		if !strings.Contains(string(got), tc.want) {
			t.Errorf("%s: answer %q, want one holding %q", tc.name, got, tc.want)
		}
		if n := allowed.hits.Load() - before; n != tc.reached {
			t.Errorf("%s: the allowed server received %d requests, want %d", tc.name, n, tc.reached)
		}
	}
	if n := other.hits.Load(); n != 0 {
		t.Fatalf("the server outside the allowlist received %d requests, want 0", n)
	}
}

// A command cannot make the worker hold connections without end: past
// MaxConns open at once, a connection is answered 503 and closed, and
// the upstream server sees only the tunnels within the bound; once one
// closes, a new one is served.
func TestProxyConnectionBound(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	p := &Proxy{MaxConns: 2, Dialer: &Dialer{Allow: allowOnly("127.0.0.1:*"), Permit: loopback}}
	sock, err := ListenUnix(p, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	target := up.Addr().String()
	tunnel := func() (net.Conn, string) {
		c, err := net.Dial("unix", sock.Path)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
		line, _ := bufio.NewReader(c).ReadString('\n')
		return c, line
	}
	var open, ups []net.Conn
	for i := range 2 {
		c, line := tunnel()
		if !strings.Contains(line, "200") {
			t.Fatalf("tunnel %d: %q", i, line)
		}
		open = append(open, c)
		ups = append(ups, testenv.Recv(t, accepted, "accepted"))
	}
	for i := range 3 {
		c, line := tunnel()
		c.Close()
		if !strings.Contains(line, "503") {
			t.Fatalf("connection %d past the bound: %q, want 503", i, line)
		}
	}
	if len(accepted) != 0 {
		t.Fatalf("the upstream accepted %d connections past the bound", len(accepted))
	}
	// Both ends of the first tunnel close: its slot is free again once
	// the proxy has seen it end (a new tunnel is retried until then).
	open[0].Close()
	ups[0].Close()
	for {
		c, line := tunnel()
		c.Close()
		if strings.Contains(line, "200") {
			(testenv.Recv(t, accepted, "accepted")).Close()
			break
		}
		if !strings.Contains(line, "503") {
			t.Fatalf("after a tunnel closed: %q", line)
		}
	}
	if refused := p.Refused(); len(refused) < 3 || !strings.Contains(refused[0], "more than 2 connections") {
		t.Fatalf("refusals %q", refused)
	}
	open[1].Close()
	ups[1].Close()
}
