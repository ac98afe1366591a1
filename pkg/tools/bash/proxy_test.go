package bash_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
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
	ws := newWorkspace(t, testUID)
	tool, err := bash.New(bash.Config{
		Workspace:      ws,
		Sandbox:        bash.ModeRequire,
		NetworkAllowed: func(c *tools.Call) bool { return c.Agent == "networked" },
		Proxy:          proxy,
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	if err := reg.Register(tool); err != nil {
		t.Fatal(err)
	}
	p := tools.NewPipeline(reg, tools.WithWorkspace(ws))
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
	// A call restricted to the programs the gate resolved (curl) goes
	// through the relay too: the relay starts the command's own first
	// program, which restricts it; what the gate did not resolve is
	// refused.
	curlPath, err := exec.LookPath("curl")
	if err == nil {
		curlPath, err = filepath.EvalSymlinks(curlPath)
	}
	if err != nil {
		t.Fatal(err)
	}
	restricted := func(command string) *tools.Output {
		t.Helper()
		gated := tools.NewPipeline(reg, tools.WithWorkspace(ws), tools.WithGate(policy.EvaluatorFunc(func(context.Context, policy.Request) policy.Decision {
			return policy.Decision{Action: policy.Allow, Rule: "test", Rendered: true, Command: command, Programs: []string{curlPath}}
		})))
		out, err := run(context.Background(), t, gated, map[string]any{"command": command}, func(c *tools.Call) { c.Agent = "networked" })
		if err != nil {
			t.Fatalf("%s: %v", command, err)
		}
		return out
	}
	if out := restricted(curl + "http://allowed.test:" + aPort + "/"); md[string](t, out, "stdout") != "200" {
		t.Errorf("restricted call through the proxy: stdout %q; stderr %s", md[string](t, out, "stdout"), md[string](t, out, "stderr"))
	}
	if out := restricted(curl + "http://allowed.test:" + aPort + "/; touch marker"); !strings.Contains(md[string](t, out, "stderr"), "Permission denied") {
		t.Errorf("restricted call through the proxy ran a program outside its list: %s", out.Content)
	}
	if _, err := os.Stat(filepath.Join(ws, "marker")); err == nil {
		t.Error("restricted call through the proxy ran touch")
	}
	// The relay is the worker's own binary: a restricted command that
	// runs it can reach any unix socket it sees (here one in the
	// workspace) through bash's /dev/tcp. Whoever executes it, it is not
	// the command's to run: the socket is never reached.
	evil := filepath.Join(ws, "evil.sock")
	el, err := net.Listen("unix", evil)
	if err != nil {
		t.Fatal(err)
	}
	defer el.Close()
	os.Chmod(evil, 0o777)
	var reached atomic.Int64
	go func() {
		for {
			c, err := el.Accept()
			if err != nil {
				return
			}
			reached.Add(1)
			c.Close()
		}
	}()
	attack := "/tmp/.toolgate-egress/relay " + relay.ForwardArg + " 127.0.0.1:7777 " + evil +
		" -- /bin/bash -c 'exec 3<>/dev/tcp/127.0.0.1/7777; echo hi >&3; sleep 1'; " + curl + "http://allowed.test:" + aPort + "/"
	out := restricted(attack)
	if !strings.Contains(md[string](t, out, "stderr"), "Permission denied") || md[string](t, out, "stdout") != "200" {
		t.Errorf("a restricted call ran the relay, or not its judged curl: %s", out.Content)
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("a restricted call reached a unix socket through the relay it ran (%d connections)", n)
	}
	// Without the grant: no proxy, no network.
	out = call("tester", curl+"http://allowed.test:"+aPort+"/")
	if got := md[string](t, out, "stdout"); got != "000" {
		t.Errorf("without the grant: stdout %q, want 000", got)
	}
	if _, ok := out.Metadata["egress"]; ok {
		t.Errorf("without the grant: egress %v", out.Metadata["egress"])
	}
	if n := opened.Load(); n != 10 {
		t.Errorf("proxies opened: %d, want one per networked call (10)", n)
	}
	if a, o := allowedHits.Load(), otherHits.Load(); a != 4 || o != 0 {
		t.Fatalf("requests received: allowed %d, other %d; want 4 and 0", a, o)
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

// The host's abstract unix sockets belong to its network namespace: a
// sandboxed command, with or without the network granted, cannot reach
// one, neither with curl nor by running the relay (the worker's own
// executable, present in the sandbox) with arguments of its choosing.
// The host's own connection proves the server listens; it is the only
// request the server receives.
func TestSandboxHostAbstractSocket(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	testenv.LookPath(t, "curl", "curl")
	name := fmt.Sprintf("toolgate-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	l, err := net.Listen("unix", "@"+name)
	if err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "host secret")
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	hostClient := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", "@"+name)
	}}}
	res, err := hostClient.Get("http://host/")
	if err != nil {
		t.Fatalf("the host's own request: %v", err)
	}
	res.Body.Close()

	dns := testenv.StartDNS(t, nil)
	pol, _, err := policy.Parse([]byte("network:\n  allow: [\"*:*\"]\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	var opened atomic.Int64
	p := newPipeline(t, bash.Config{
		Workspace:      newWorkspace(t, testUID),
		Sandbox:        bash.ModeRequire,
		NetworkAllowed: func(c *tools.Call) bool { return c.Agent == "networked" },
		Proxy:          testProxy(t, policy.NewGate(pol), dns, &opened),
	})
	for _, tc := range []struct{ agent, command string }{
		{"networked", "curl -sS --max-time 20 --abstract-unix-socket " + name + " http://host/"},
		{"tester", "curl -sS --max-time 20 --abstract-unix-socket " + name + " http://host/"},
		{"networked", "/tmp/.toolgate-egress/relay " + relay.ForwardArg + " 127.0.0.1:9009 @" + name + " -- curl -sS --max-time 20 --noproxy '*' http://127.0.0.1:9009/"},
		{"networked", "/tmp/.toolgate-egress/relay " + relay.ForwardArg + " 127.0.0.1:9009 /proc/1/root/@" + name + " -- curl -sS --max-time 20 --noproxy '*' http://127.0.0.1:9009/"},
	} {
		out, err := run(context.Background(), t, p, map[string]any{"command": tc.command}, func(c *tools.Call) { c.Agent = tc.agent })
		if err != nil {
			t.Fatalf("%s: %v", tc.command, err)
		}
		if s := md[string](t, out, "stdout"); strings.Contains(s, "host secret") || md[int](t, out, "exit_code") == 0 {
			t.Errorf("%s (%s): exit %v stdout %q stderr %q", tc.command, tc.agent, out.Metadata["exit_code"], s, md[string](t, out, "stderr"))
		}
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("the host's abstract socket received %d requests, want 1 (the host's own)", n)
	}
}

// The worker's temporary directory (TMPDIR) may lie outside /tmp, where
// the sandbox's root binding shows it: a call that was not granted the
// network, running as the worker's own user or as root without
// capabilities (a root-owned workspace), must still not reach another
// call's proxy socket there. The allowed server receives only the
// networked call's own request.
func TestSandboxOtherCallsProxySocket(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	testenv.LookPath(t, "curl", "curl")
	tmp, err := os.MkdirTemp("/var/tmp", "toolgate-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	t.Setenv("TMPDIR", tmp)
	allowed, hits := countingServer(t)
	aPort := port(t, allowed.URL)
	dns := testenv.StartDNS(t, map[string][]netip.Addr{"allowed.test": {netip.MustParseAddr("127.0.0.1")}})
	pol, _, err := policy.Parse([]byte("network:\n  allow: [\"allowed.test:*\"]\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	gate := policy.NewGate(pol)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	opened := make(chan string, 1)
	proxy := &bash.Proxy{
		Relay: []string{exe, relay.ForwardArg},
		Open: func(ctx context.Context, c *tools.Call) (string, func() []string, error) {
			d := &egress.Dialer{Allow: gate.Egress(c.Agent).Check, Resolver: dns.Resolver(),
				Permit: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
			p := &egress.Proxy{Dialer: d}
			s, err := egress.ListenUnix(p, "") // where the worker puts it: its TMPDIR
			if err != nil {
				return "", nil, err
			}
			opened <- s.Path
			return s.Path, func() []string { s.Close(); return p.Refused() }, nil
		},
	}
	ws := newWorkspace(t, 0) // commands run as root without capabilities
	p := newPipeline(t, bash.Config{
		Workspace:      ws,
		Sandbox:        bash.ModeRequire,
		NetworkAllowed: func(c *tools.Call) bool { return c.Agent == "networked" },
		Proxy:          proxy,
	})
	curl := "curl -sS --max-time 20 -o /dev/null -w '%{http_code}' "
	type result struct {
		out *tools.Output
		err error
	}
	first := make(chan result, 1)
	go func() {
		// Holds its proxy open until the other call is done, then uses it.
		out, err := run(context.Background(), t, p, map[string]any{"command": "while [ ! -e done ]; do sleep 0.1; done; " + curl + "http://allowed.test:" + aPort + "/"},
			func(c *tools.Call) { c.Agent = "networked" })
		first <- result{out, err}
	}()
	sock := testenv.Recv(t, opened, "opened")
	out, err := run(context.Background(), t, p, map[string]any{"command": "ls -d " + tmp + "/toolgate-egress-*; for s in " + tmp + "/toolgate-egress-*/proxy.sock; do " +
		curl + "--unix-socket \"$s\" --request-target http://allowed.test:" + aPort + "/ http://allowed.test:" + aPort + "/; done; touch done"})
	if err != nil {
		t.Fatal(err)
	}
	r := testenv.Recv(t, first, "first")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := md[string](t, r.out, "stdout"); got != "200" {
		t.Errorf("the networked call: stdout %q, want 200; stderr %s", got, md[string](t, r.out, "stderr"))
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("the allowed server received %d requests, want 1 (the networked call's own); the other call (socket %s) printed %q, %q",
			n, sock, md[string](t, out, "stdout"), md[string](t, out, "stderr"))
	}
}
