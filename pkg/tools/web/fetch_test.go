package web_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/web"
)

// site is a test HTTP server that counts the requests it received.
type site struct {
	*httptest.Server
	hits atomic.Int64
}

func newSite(t *testing.T, h http.HandlerFunc) *site {
	s := &site{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *site) port() string {
	u, _ := url.Parse(s.URL)
	return u.Port()
}

// env is a pipeline with web_fetch whose egress resolves names through a
// real DNS server (every test name is 127.0.0.1) and judges them by a
// policy; loopback is permitted for the test servers unless strict.
type env struct {
	pipe  *tools.Pipeline
	gate  *policy.Gate
	dns   *testenv.DNS
	agent string
}

func newEnv(t *testing.T, policyYAML string, permit []netip.Prefix) *env {
	t.Helper()
	lo := netip.MustParseAddr("127.0.0.1")
	dns := testenv.StartDNS(t, map[string][]netip.Addr{"docs.test": {lo}, "other.test": {lo}, "mirror.test": {lo},
		"rebind.test": {netip.MustParseAddr("127.0.0.2")}})
	p, _, err := policy.Parse([]byte(policyYAML), "test")
	if err != nil {
		t.Fatal(err)
	}
	gate := policy.NewGate(p)
	tool, err := web.NewFetch(web.FetchConfig{Egress: func(c *tools.Call) web.Egress {
		return &egress.Dialer{Allow: gate.Egress(c.Agent).Check, Resolver: dns.Resolver(), Permit: permit}
	}})
	if err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	if err := reg.Register(tool); err != nil {
		t.Fatal(err)
	}
	return &env{pipe: tools.NewPipeline(reg, tools.WithGate(gate)), gate: gate, dns: dns, agent: "agent-1"}
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}

func (e *env) fetch(t *testing.T, args map[string]any, progress func(stream, chunk string)) (*tools.Output, error) {
	t.Helper()
	raw, _ := json.Marshal(args)
	return e.pipe.Handle(context.Background(), &tools.Call{ID: "c1", Agent: e.agent, Name: "web_fetch", Arguments: raw, Progress: progress})
}

const allowAll = "kinds: {network: allow}\nnetwork: {allow: [\"docs.test:*\", \"mirror.test:*\", \"rebind.test:*\"]}\n"

func TestFetchHTMLAndText(t *testing.T) {
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/page":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, `<html><head><title>Doc</title><script>evil()</script></head><body><h1>Intro</h1><p>Read <a href="/more">more</a>.</p></body></html>`)
		case "/latin1":
			w.Header().Set("Content-Type", "text/plain; charset=iso-8859-1")
			w.Write([]byte("caf\xe9"))
		case "/data.json":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"a": [1, 2]}`)
		case "/image":
			w.Header().Set("Content-Type", "image/png")
			w.Write([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"))
		case "/unknown":
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write([]byte("ELF\x00\x01\x02\x03"))
		case "/missing":
			http.Error(w, "no such page", http.StatusNotFound)
		}
	})
	e := newEnv(t, allowAll, loopback)
	base := "http://docs.test:" + s.port()
	for _, tc := range []struct {
		path    string
		isError bool
		want    []string
		never   []string
	}{
		{"/page", false, []string{"Title: Doc", "# Intro", "Read [more](" + base + "/more).", "Status: 200"}, []string{"evil()", "<h1>"}},
		{"/latin1", false, []string{"café"}, nil},
		{"/data.json", false, []string{`{"a": [1, 2]}`}, nil},
		{"/image", true, []string{"binary content (image/png", "not returned"}, []string{"PNG"}},
		{"/unknown", true, []string{"binary content (application/octet-stream"}, nil},
		{"/missing", true, []string{"Status: 404", "no such page"}, nil},
	} {
		out, err := e.fetch(t, map[string]any{"url": base + tc.path}, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		if out.IsError != tc.isError {
			t.Errorf("%s: IsError %v, want %v: %s", tc.path, out.IsError, tc.isError, out.Content)
		}
		for _, w := range tc.want {
			if !strings.Contains(out.Content, w) {
				t.Errorf("%s: content lacks %q:\n%s", tc.path, w, out.Content)
			}
		}
		for _, n := range tc.never {
			if strings.Contains(out.Content, n) {
				t.Errorf("%s: content holds %q:\n%s", tc.path, n, out.Content)
			}
		}
	}
}

// Every redirect is judged before it is followed: to a host outside the
// allowlist, to an address, or to an allowed name that resolves to a
// refused address, the fetch stops and the target never sees a request.
func TestFetchRedirects(t *testing.T) {
	target := newSite(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "reached "+r.Host) })
	var to atomic.Value
	start := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, to.Load().(string), http.StatusFound)
	})
	e := newEnv(t, allowAll, loopback)
	for _, tc := range []struct {
		name, to, want string
		reached        bool
	}{
		{"to an allowed host", "http://mirror.test:" + target.port() + "/x", "reached mirror.test", true},
		{"to a host outside the allowlist", "http://other.test:" + target.port() + "/x", "not in the policy's network allowlist", false},
		{"to an address", "http://127.0.0.1:" + target.port() + "/x", "not in the policy's network allowlist", false},
		{"to an allowed name resolving to loopback", "http://rebind.test:" + target.port() + "/x", "127.0.0.2 (loopback address)", false},
		{"to another scheme", "file:///etc/passwd", `redirect to file:///etc/passwd refused: URL scheme "file" is not http or https`, false},
	} {
		before := target.hits.Load()
		to.Store(tc.to)
		out, err := e.fetch(t, map[string]any{"url": "http://docs.test:" + start.port() + "/start"}, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !strings.Contains(out.Content, tc.want) || out.IsError == tc.reached {
			t.Errorf("%s: %s (error %v), want %q", tc.name, out.Content, out.IsError, tc.want)
		}
		if got := target.hits.Load() - before; got != map[bool]int64{true: 1, false: 0}[tc.reached] {
			t.Errorf("%s: the target received %d requests", tc.name, got)
		}
		if tc.reached && len(out.Metadata["redirects"].([]string)) != 1 {
			t.Errorf("%s: redirects %v", tc.name, out.Metadata["redirects"])
		}
	}
}

// Names resolving to loopback are refused when nothing is permitted,
// whatever the allowlist says: the server never sees a request.
func TestFetchRefusesPrivateAddresses(t *testing.T) {
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "secret") })
	e := newEnv(t, allowAll+"agents: {x: {network: {allow: [\"*:*\", \"127.0.0.1:*\"]}}}\n", nil)
	e.agent = "x"
	for _, u := range []string{"http://docs.test:" + s.port() + "/", "http://127.0.0.1:" + s.port() + "/", "http://[::ffff:127.0.0.1]:" + s.port() + "/"} {
		out, err := e.fetch(t, map[string]any{"url": u}, nil)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		if !out.IsError || !strings.Contains(out.Content, "refused") {
			t.Errorf("%s: %s, want refused", u, out.Content)
		}
	}
	if n := s.hits.Load(); n != 0 {
		t.Fatalf("the server received %d requests, want 0", n)
	}
}

// A host outside the allowlist is denied by the gate before anything
// connects; with the built-in policy a person is asked.
func TestFetchPolicy(t *testing.T) {
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) {})
	e := newEnv(t, allowAll, loopback)
	queries := e.dns.Queries()
	_, err := e.fetch(t, map[string]any{"url": "http://other.test:" + s.port() + "/"}, nil)
	var pe *tools.PolicyError
	if !errors.As(err, &pe) || !errors.Is(err, tools.ErrDenied) || pe.Decision.Rule != "network.allow" {
		t.Fatalf("got %v, want denied by network.allow", err)
	}
	e.gate.Set(nil) // the built-in policy
	_, err = e.fetch(t, map[string]any{"url": "http://docs.test/"}, nil)
	if !errors.Is(err, tools.ErrApprovalRequired) {
		t.Fatalf("built-in policy: %v, want approval required", err)
	}
	if s.hits.Load() != 0 || e.dns.Queries() != queries {
		t.Fatalf("requests %d, DNS queries %d: nothing should have been looked up or sent", s.hits.Load(), e.dns.Queries()-queries)
	}
}

func TestFetchBoundsAndProgress(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, strings.Repeat("0123456789\n", 100_000)) // 1.1 MB
		case "/slow":
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	})
	e := newEnv(t, allowAll, loopback)
	var mu sync.Mutex
	var lines []string
	progress := func(stream, chunk string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, stream+": "+chunk)
	}
	out, err := e.fetch(t, map[string]any{"url": "http://docs.test:" + s.port() + "/big", "max_bytes": 600_000}, progress)
	if err != nil {
		t.Fatal(err)
	}
	if out.Metadata["truncated"] != true || out.Metadata["bytes"] != 600_000 || !strings.Contains(out.Content, "cut after 600000 bytes") {
		t.Errorf("metadata %v", out.Metadata)
	}
	mu.Lock()
	all := strings.Join(lines, "")
	mu.Unlock()
	for _, w := range []string{"status: GET http://docs.test:", "status: 200 OK text/plain, ", "status: read 2", "status: read 5"} {
		if !strings.Contains(all, w) {
			t.Errorf("progress lacks %q: %s", w, all)
		}
	}
	if len(lines) > 6 {
		t.Errorf("%d progress lines for 600 kB, want a bounded few: %v", len(lines), lines)
	}

	_, err = e.fetch(t, map[string]any{"url": "http://docs.test:" + s.port() + "/slow", "timeout": 300}, nil)
	if !errors.Is(err, tools.ErrTimeout) {
		t.Fatalf("slow server: %v, want ErrTimeout", err)
	}
	if !strings.Contains(fmt.Sprint(err), "timeout of 300ms") {
		t.Errorf("the error does not name the timeout: %v", err)
	}
}

// Every spelling of a loopback address an agent can put in a URL, with
// an allowlist of every host and port and the system's resolver: the
// servers on 127.0.0.1 and ::1 never see a request.
func TestFetchAddressSpellings(t *testing.T) {
	var hits atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1); io.WriteString(w, "secret") })
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	port := s.Listener.Addr().(*net.TCPAddr).Port
	if l, err := net.Listen("tcp6", fmt.Sprintf("[::1]:%d", port)); err == nil { // the same port on ::1, where IPv6 loopback exists
		s6 := &http.Server{Handler: h}
		go s6.Serve(l)
		t.Cleanup(func() { s6.Close() })
	}
	p, _, err := policy.Parse([]byte("kinds: {network: allow}\nnetwork: {allow: [\"*:*\"]}\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	gate := policy.NewGate(p)
	tool, err := web.NewFetch(web.FetchConfig{Egress: func(c *tools.Call) web.Egress {
		return &egress.Dialer{Allow: gate.Egress(c.Agent).Check} // the system's resolver, nothing permitted
	}})
	if err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	if err := reg.Register(tool); err != nil {
		t.Fatal(err)
	}
	pipe := tools.NewPipeline(reg, tools.WithGate(gate))
	for _, host := range []string{
		"127.0.0.1", "127.1", "127.0.1", "2130706433", "0x7f000001", "0x7f.0.0.1", "0177.0.0.1", "017700000001",
		"127.0.0.1.", "localhost", "LOCALHOST.", "localhost.localdomain", "0", "0.0.0.0", "[::]", "[::1]",
		"[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[0:0:0:0:0:ffff:127.0.0.1]", "[::127.0.0.1]", "[64:ff9b::7f00:1]",
		"[64:ff9b:1::7f00:1]", "[2002:7f00:1::]", "[2001:0:7f00:1::]", "[fe80::1%25lo]", "[::1%25lo]", "%31%32%37.0.0.1",
	} {
		u := fmt.Sprintf("http://%s:%d/", host, port)
		raw, _ := json.Marshal(map[string]any{"url": u})
		out, err := pipe.Handle(context.Background(), &tools.Call{ID: "c1", Agent: "a", Name: "web_fetch", Arguments: raw})
		if err == nil && !out.IsError {
			t.Errorf("%s: fetched: %s", u, out.Content)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the loopback servers received %d requests, want 0", n)
	}
}

// A deny entry that is an address or a range holds for every name that
// resolves into it, not only for the address written in a URL: the
// operator's own public addresses (here loopback, permitted like an
// intranet the operator opened) stay out of reach under an allow-all
// list. The server never sees a request; with no deny entry it does.
func TestFetchDeniedAddressByName(t *testing.T) {
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "operator's own") })
	lo := netip.MustParseAddr("127.0.0.1")
	dns := testenv.StartDNS(t, map[string][]netip.Addr{"docs.test": {lo}, "127-0-0-1.nip.test": {lo}})
	for _, tc := range []struct {
		deny    string
		reached bool
	}{
		{"127.0.0.1", false},
		{"127.0.0.0/8", false},
		{"127.0.0.1:*", false},
		{"[::ffff:127.0.0.1]", false},
		{"198.51.100.0/24", true}, // another range: the control
	} {
		p, _, err := policy.Parse([]byte("kinds: {network: allow}\nnetwork: {allow: [\"*:*\"], deny: [\""+tc.deny+"\"]}\n"), "test")
		if err != nil {
			t.Fatal(err)
		}
		gate := policy.NewGate(p)
		tool, err := web.NewFetch(web.FetchConfig{Egress: func(c *tools.Call) web.Egress {
			d := egress.PolicyDialer(func() *policy.Egress { return gate.Egress(c.Agent) })
			d.Resolver, d.Permit = dns.Resolver(), loopback
			return d
		}})
		if err != nil {
			t.Fatal(err)
		}
		reg := tools.NewRegistry()
		if err := reg.Register(tool); err != nil {
			t.Fatal(err)
		}
		pipe := tools.NewPipeline(reg, tools.WithGate(gate))
		for _, host := range []string{"docs.test", "127-0-0-1.nip.test"} {
			before := s.hits.Load()
			raw, _ := json.Marshal(map[string]any{"url": "http://" + host + ":" + s.port() + "/"})
			out, err := pipe.Handle(context.Background(), &tools.Call{ID: "c1", Agent: "a", Name: "web_fetch", Arguments: raw})
			if err != nil {
				t.Fatalf("deny %s, %s: %v", tc.deny, host, err)
			}
			if got := s.hits.Load() - before; got != map[bool]int64{true: 1, false: 0}[tc.reached] {
				t.Errorf("deny %s, %s: the server received %d requests (%s)", tc.deny, host, got, out.Content)
			}
			if !tc.reached && !strings.Contains(out.Content, "denied by") {
				t.Errorf("deny %s, %s: %s, want the deny entry named", tc.deny, host, out.Content)
			}
		}
	}
}

// Servers built to exhaust the fetcher: a gzip bomb (64 MiB of text in
// about 64 kB) is cut at max_bytes of decoded text; headers past the
// bound, and a redirect loop, end the fetch with an error, the loop after
// a bounded count of requests.
func TestFetchHostileServers(t *testing.T) {
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	chunk := bytes.Repeat([]byte("a"), 1<<20)
	for range 64 {
		zw.Write(chunk)
	}
	zw.Close()
	var loops atomic.Int64
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/bomb":
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(bomb.Bytes())
		case "/headers":
			for i := range 300 {
				w.Header().Set(fmt.Sprintf("X-Pad-%d", i), strings.Repeat("x", 8<<10))
			}
			io.WriteString(w, "never read")
		case "/loop":
			loops.Add(1)
			http.Redirect(w, r, "/loop", http.StatusFound)
		}
	})
	e := newEnv(t, allowAll, loopback)
	base := "http://docs.test:" + s.port()
	out, err := e.fetch(t, map[string]any{"url": base + "/bomb", "max_bytes": 100_000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.Metadata["bytes"] != 100_000 || out.Metadata["truncated"] != true || len(out.Content) > 200_000 {
		t.Errorf("gzip bomb: bytes %v truncated %v, %d characters out", out.Metadata["bytes"], out.Metadata["truncated"], len(out.Content))
	}
	for _, tc := range []struct{ path, want string }{
		{"/headers", "header"},
		{"/loop", "redirects"},
	} {
		out, err := e.fetch(t, map[string]any{"url": base + tc.path}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !out.IsError || !strings.Contains(out.Content, tc.want) || strings.Contains(out.Content, "never read") {
			t.Errorf("%s: %s, want an error about %s", tc.path, out.Content, tc.want)
		}
	}
	if n := loops.Load(); n != web.MaxRedirects+1 {
		t.Errorf("the redirect loop was followed %d times, want %d", n, web.MaxRedirects+1)
	}
}

// A deny entry written with the root's trailing dot ("docs.test.") is
// the same name: under an allow-all list its host is never reached,
// however the URL spells it.
func TestFetchDeniedNameWithRootDot(t *testing.T) {
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "internal") })
	e := newEnv(t, "kinds: {network: allow}\nnetwork: {allow: [\"*:*\"], deny: [\"docs.test.\", \"*.internal.test.\"]}\n", loopback)
	for _, host := range []string{"docs.test", "DOCS.test.", "Docs.Test"} {
		out, err := e.fetch(t, map[string]any{"url": "http://" + host + ":" + s.port() + "/"}, nil)
		if err == nil && !out.IsError {
			t.Errorf("%s: fetched: %s", host, out.Content)
		}
	}
	if n := s.hits.Load(); n != 0 {
		t.Fatalf("the denied host received %d requests, want 0", n)
	}
	out, err := e.fetch(t, map[string]any{"url": "http://mirror.test:" + s.port() + "/"}, nil)
	if err != nil || out.IsError || s.hits.Load() != 1 {
		t.Fatalf("a host not denied: %v %v, %d requests", err, out, s.hits.Load())
	}
}
