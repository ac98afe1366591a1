package bash_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/egress/relay"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// countingServer is an HTTP server that counts the requests it received.
func countingServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "hello from "+r.Host)
	}))
	t.Cleanup(s.Close)
	return s, &hits
}

// With the network granted and a proxy configured, a sandboxed command
// reaches an allowlisted host through the proxy and nothing else: not a
// host outside the allowlist, not an address, not anything directly. The
// servers' request counts prove what reached them.
func TestSandboxNetworkThroughProxy(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	testenv.LookPath(t, "curl", "curl")
	allowed, allowedHits := countingServer(t)
	other, otherHits := countingServer(t)
	aPort, oPort := port(t, allowed.URL), port(t, other.URL)
	lo := netip.MustParseAddr("127.0.0.1")
	dns := testenv.StartDNS(t, map[string][]netip.Addr{"allowed.test": {lo}, "other.test": {lo}})
	pol, _, err := policy.Parse([]byte(fmt.Sprintf("network:\n  allow: [\"allowed.test:%s\"]\n", aPort)), "test")
	if err != nil {
		t.Fatal(err)
	}
	gate := policy.NewGate(pol)
	var opened atomic.Int64
	proxy := testProxy(t, gate, dns, &opened)
	p := newPipeline(t, bash.Config{
		Workspace:      newWorkspace(t, testUID),
		Sandbox:        bash.ModeRequire,
		NetworkAllowed: func(c *tools.Call) bool { return c.Agent == "networked" },
		Proxy:          proxy,
	})
	call := func(agent, command string) *tools.Output {
		t.Helper()
		out, err := run(context.Background(), t, p, map[string]any{"command": command}, func(c *tools.Call) { c.Agent = agent })
		if err != nil {
			t.Fatalf("%s: %v", command, err)
		}
		return out
	}
	curl := "curl -sS --max-time 20 -o /dev/null -w '%{http_code}' "
	for _, tc := range []struct {
		name, command, stdout string
		exit                  int
		refused               string // in the result's egress_refused
	}{
		{"allowed host through the proxy", curl + "http://allowed.test:" + aPort + "/", "200", 0, ""},
		{"allowed name, other port", curl + "http://allowed.test:" + oPort + "/", "403", 0, "allowed.test:" + oPort + ": allowed.test:" + oPort + " is not in the policy's network allowlist"},
		{"host outside the allowlist", curl + "http://other.test:" + oPort + "/", "403", 0, "other.test:" + oPort + " is not in the policy's network allowlist"},
		{"https to a host outside the allowlist", curl + "https://other.test:" + oPort + "/", "000", 56, "other.test:" + oPort + " is not in"},
		{"address literal", curl + "--noproxy '' http://127.0.0.1:" + oPort + "/", "403", 0, "127.0.0.1:" + oPort + " is not in"},
		{"direct, bypassing the proxy", curl + "--noproxy '*' http://127.0.0.1:" + oPort + "/", "000", 7, ""},
		{"exit status through the relay", "exit 3", "", 3, ""},
	} {
		out := call("networked", tc.command)
		got := md[string](t, out, "stdout")
		if got != tc.stdout || md[int](t, out, "exit_code") != tc.exit {
			t.Errorf("%s: stdout %q exit %v, want %q exit %v; stderr %s", tc.name, got, out.Metadata["exit_code"],
				tc.stdout, tc.exit, md[string](t, out, "stderr"))
		}
		refused, _ := out.Metadata["egress_refused"].([]string)
		if tc.refused == "" && len(refused) > 0 || tc.refused != "" && (len(refused) != 1 || !strings.Contains(refused[0], tc.refused)) {
			t.Errorf("%s: egress_refused %q, want one containing %q", tc.name, refused, tc.refused)
		}
		if md[string](t, out, "egress") != "proxy" || !md[bool](t, out, "network") {
			t.Errorf("%s: metadata network %v egress %v", tc.name, out.Metadata["network"], out.Metadata["egress"])
		}
	}
	// Without the grant: no proxy, no network.
	out := call("tester", curl+"http://allowed.test:"+aPort+"/")
	if got := md[string](t, out, "stdout"); got != "000" {
		t.Errorf("without the grant: stdout %q, want 000", got)
	}
	if _, ok := out.Metadata["egress"]; ok {
		t.Errorf("without the grant: egress %v", out.Metadata["egress"])
	}
	if n := opened.Load(); n != 7 {
		t.Errorf("proxies opened: %d, want one per networked call (7)", n)
	}
	if a, o := allowedHits.Load(), otherHits.Load(); a != 1 || o != 0 {
		t.Fatalf("requests received: allowed %d, other %d; want 1 and 0", a, o)
	}
}

// testProxy is the egress proxy the worker configures, with the test's
// DNS server and loopback permitted (the test servers listen there).
func testProxy(t *testing.T, gate *policy.Gate, dns *testenv.DNS, opened *atomic.Int64) *bash.Proxy {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &bash.Proxy{
		Relay: []string{exe, relay.ForwardArg},
		Open: func(ctx context.Context, c *tools.Call) (string, func() []string, error) {
			opened.Add(1)
			d := &egress.Dialer{Allow: gate.Egress(c.Agent).Check, Resolver: dns.Resolver(),
				Permit: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
			p := &egress.Proxy{Dialer: d}
			s, err := egress.ListenUnix(p, t.TempDir())
			if err != nil {
				return "", nil, err
			}
			return s.Path, func() []string { s.Close(); return p.Refused() }, nil
		},
	}
}

func port(t *testing.T, raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Port() == "" {
		t.Fatalf("url %q: %v", raw, err)
	}
	return u.Port()
}
