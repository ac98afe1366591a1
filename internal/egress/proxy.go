package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/pkg/policy"
)

// Proxy is the filtering HTTP/HTTPS forward proxy in front of a sandbox:
// CONNECT host:port opens a tunnel (https, or any TLS protocol) and an
// absolute http:// request is forwarded, both only through Dialer, so
// the allowlist and the address checks apply to every connection. It
// follows no redirect itself: the client's next request passes the same
// checks. A refusal is a 403 whose body says why.
type Proxy struct {
	// Dialer judges and opens every upstream connection. Required.
	Dialer *Dialer
	// Logger receives one line per refused connection; nil means
	// slog.Default().
	Logger *slog.Logger
	// MaxConns bounds the connections open to the proxy at once (each
	// holds one upstream connection of the worker's at most); one more
	// is answered 503 and closed. Zero means DefaultMaxConns.
	MaxConns int

	once      sync.Once
	transport *http.Transport
	mu        sync.Mutex
	tunnels   map[net.Conn]struct{}
	closed    bool
	refused   []string
	dropped   int
}

// DefaultMaxConns is a Proxy's bound on connections open at once: what
// parallel downloads need, far below the worker's file descriptors.
const DefaultMaxConns = 256

// maxRefused bounds the refusals a Proxy remembers.
const maxRefused = 20

// Refused returns the connections refused so far, each "target: reason",
// the first maxRefused of them and a count of the rest.
func (p *Proxy) Refused() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := append([]string(nil), p.refused...)
	if p.dropped > 0 {
		out = append(out, fmt.Sprintf("... and %d more", p.dropped))
	}
	return out
}

// hopHeaders are the hop-by-hop headers a proxy does not forward.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (p *Proxy) log() *slog.Logger {
	if p.Logger != nil {
		return p.Logger
	}
	return slog.Default()
}

// ServeHTTP handles one proxy request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	if !r.URL.IsAbs() || r.URL.Host == "" {
		http.Error(w, "toolgate egress proxy: send requests as a proxy (absolute URL or CONNECT)", http.StatusBadRequest)
		return
	}
	if r.URL.Scheme != "http" {
		http.Error(w, fmt.Sprintf("toolgate egress proxy: scheme %q is not proxied (use CONNECT for https)", r.URL.Scheme), http.StatusBadRequest)
		return
	}
	p.forward(w, r)
}

func (p *Proxy) refuse(w http.ResponseWriter, target string, err error) {
	p.note(target, err)
	w.Header().Set("X-Toolgate-Egress", "refused")
	code := http.StatusForbidden
	if !isRefusal(err) {
		code = http.StatusBadGateway
	}
	http.Error(w, "toolgate egress proxy: "+err.Error(), code)
}

// note logs and remembers a refusal.
func (p *Proxy) note(target string, err error) {
	p.log().Info("egress refused", "target", target, "err", err)
	p.mu.Lock()
	if len(p.refused) < maxRefused {
		p.refused = append(p.refused, target+": "+err.Error())
	} else {
		p.dropped++
	}
	p.mu.Unlock()
}

// isRefusal reports whether err is a policy or address refusal rather
// than a failure of the upstream.
func isRefusal(err error) bool {
	return errors.Is(err, ErrForbiddenAddress) || errors.Is(err, ErrNoAllowlist) || errors.Is(err, policy.ErrEgressDenied)
}

func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	target := r.Host
	if _, _, err := net.SplitHostPort(target); err != nil {
		http.Error(w, "toolgate egress proxy: CONNECT needs host:port", http.StatusBadRequest)
		return
	}
	up, err := p.Dialer.DialContext(r.Context(), "tcp", target)
	if err != nil {
		p.refuse(w, target, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "toolgate egress proxy: cannot tunnel on this connection", http.StatusInternalServerError)
		return
	}
	client, rw, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if !p.track(client, up) {
		client.Close()
		up.Close()
		return
	}
	defer p.untrack(client, up)
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection Established\r\n\r\n")); err != nil {
		return
	}
	splice(client, rw.Reader, up)
}

// splice copies both ways until either side ends, then closes both.
func splice(client net.Conn, buffered *bufio.Reader, up net.Conn) {
	done := make(chan struct{}, 2)
	go func() {
		io.Copy(up, buffered) // what the client sent after CONNECT, then the rest
		closeWrite(up)
		done <- struct{}{}
	}()
	go func() {
		io.Copy(client, up)
		closeWrite(client)
		done <- struct{}{}
	}()
	<-done
	<-done
	client.Close()
	up.Close()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if p.tunnels == nil {
		p.tunnels = map[net.Conn]struct{}{}
	}
	for _, c := range cs {
		p.tunnels[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.tunnels, c)
	}
}

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request) {
	p.once.Do(func() { p.transport = p.Dialer.Transport() })
	out := r.Clone(r.Context())
	out.RequestURI = ""
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	for _, h := range strings.Split(r.Header.Get("Connection"), ",") {
		if h = strings.TrimSpace(h); h != "" {
			out.Header.Del(h)
		}
	}
	if r.ContentLength == 0 {
		out.Body = nil
	}
	res, err := p.transport.RoundTrip(out)
	if err != nil {
		p.refuse(w, r.URL.Host, err)
		return
	}
	defer res.Body.Close()
	for _, h := range hopHeaders {
		res.Header.Del(h)
	}
	for k, vs := range res.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(res.StatusCode)
	io.Copy(w, res.Body)
}

// Close ends every tunnel and idle upstream connection; later CONNECTs
// are refused.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.tunnels {
		c.Close()
	}
	p.tunnels = nil
	p.mu.Unlock()
	if p.transport != nil {
		p.transport.CloseIdleConnections()
	}
}

// Socket is a Proxy served on a unix socket of its own, for one call.
type Socket struct {
	// Path is the socket's path.
	Path string

	dir   string
	srv   *http.Server
	proxy *Proxy
	done  chan struct{}
}

// ListenUnix serves p on a new unix socket in a fresh directory under
// parent (os.TempDir() when empty). The socket may be connected to by
// any user (the sandboxed command may run as another); the directory is
// the worker's own (0700), so only a sandbox it is bound into reaches it.
func ListenUnix(p *Proxy, parent string) (*Socket, error) {
	dir, err := os.MkdirTemp(parent, "toolgate-egress-")
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	path := filepath.Join(dir, "proxy.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		l.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	max := p.MaxConns
	if max <= 0 {
		max = DefaultMaxConns
	}
	l = &limitListener{Listener: l, proxy: p, slots: make(chan struct{}, max)}
	s := &Socket{Path: path, dir: dir, proxy: p, done: make(chan struct{}),
		srv: &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(p.log().Handler(), slog.LevelDebug)}}
	go func() {
		defer close(s.done)
		s.srv.Serve(l)
	}()
	return s, nil
}

// Close stops serving, ends every connection and tunnel, and removes the
// socket.
func (s *Socket) Close() error {
	err := s.srv.Shutdown(closedContext())
	s.srv.Close()
	s.proxy.Close()
	<-s.done
	os.RemoveAll(s.dir)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// closedContext is already done: Shutdown closes the listener and idle
// connections and returns at once.
func closedContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// limitListener answers a connection past its bound with 503 and closes
// it, so that a command cannot make the worker hold connections (file
// descriptors, upstream sockets) without end.
type limitListener struct {
	net.Listener
	proxy *Proxy
	slots chan struct{}
}

// tooMany is the whole answer to a connection past the bound.
const tooMany = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n" +
	"X-Toolgate-Egress: refused\r\nConnection: close\r\n\r\n" +
	"toolgate egress proxy: too many connections open at once\n"

// Accept returns the next connection within the bound.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &slotConn{Conn: c, release: sync.OnceFunc(func() { <-l.slots })}, nil
		default:
		}
		l.proxy.note("proxy", fmt.Errorf("more than %d connections open at once", cap(l.slots)))
		go func() {
			io.WriteString(c, tooMany)
			c.Close()
		}()
	}
}

// slotConn gives its slot back when closed.
type slotConn struct {
	net.Conn
	release func()
}

// Close closes the connection and frees its slot.
func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// CloseWrite half-closes the connection where it can (a tunnel's end).
func (c *slotConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}
