package relay_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/egress/relay"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy"
)

// TestMain gives the tests a state directory of their own; the binary
// is the relay when a test starts it as one.
func TestMain(m *testing.M) { testenv.Main(m) }

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// The relay carries a loopback port to the proxy's unix socket while the
// command runs, and returns the command's exit status.
func TestForwarder(t *testing.T) {
	curl := testenv.LookPath(t, "curl", "curl")
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "hello from "+r.Host)
	}))
	defer srv.Close()
	port := strconv.Itoa(srv.Listener.Addr().(*net.TCPAddr).Port)
	pol, _, err := policy.Parse([]byte("network: {allow: [\"allowed.test:*\"]}"), "test")
	if err != nil {
		t.Fatal(err)
	}
	dns := testenv.StartDNS(t, map[string][]netip.Addr{"allowed.test": {netip.MustParseAddr("127.0.0.1")}})
	p := &egress.Proxy{Dialer: &egress.Dialer{Allow: policy.NewGate(pol).Egress("a").Check, Resolver: dns.Resolver(),
		Permit: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}}
	sock, err := egress.ListenUnix(p, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	listen := freePort(t)
	run := func(command ...string) (int, string) {
		cmd := exec.Command(self, append([]string{relay.ForwardArg}, relay.ForwarderArgs(listen, sock.Path, command)...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), out.String()
	}
	url := "http://allowed.test:" + port + "/"
	if code, out := run(curl, "-sS", "--fail", "-x", "http://"+listen, url); code != 0 || out != "hello from allowed.test:"+port {
		t.Fatalf("curl through the relay: exit %d, %q", code, out)
	}
	if code, _ := run("sh", "-c", "exit 7"); code != 7 {
		t.Fatalf("exit status %d, want 7", code)
	}
	if code, out := run("sh", "-c", "kill -TERM $$"); code != 128+15 {
		t.Fatalf("killed by SIGTERM: exit %d (%s), want 143", code, out)
	}
	if code, _ := run(); code != 126 {
		t.Fatalf("no command: exit %d, want 126", code)
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("the server received %d requests, want 1", n)
	}
}
