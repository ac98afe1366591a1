package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/loopback"
)

// Path is where the Streamable HTTP face answers.
const Path = "/mcp"

// sessionIdle closes HTTP sessions that saw no request for this long.
const sessionIdle = 30 * time.Minute

// StreamHandler is the Streamable HTTP handler of s alone (no checks):
// its sessions are s's, so a session id never crosses to another Server.
func StreamHandler(s *Server, log *slog.Logger) http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		Logger: log, SessionTimeout: sessionIdle,
	})
}

// Guard refuses what a browser could send on its own: when loopback is
// true (the listener is on a loopback address) requests whose Host, and
// Origin when present, do not name the loopback host (a web page reaching
// it through DNS rebinding); otherwise requests from another origin.
func Guard(next http.Handler, loopback bool) http.Handler {
	if loopback {
		return localOnly(next)
	}
	return http.NewCrossOriginProtection().Handler(next)
}

// localOnly refuses requests whose Host or Origin is not a loopback name
// (localhost, 127.0.0.1, [::1], any port) with 403.
func localOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopback.Host(r.Host) {
			http.Error(w, "forbidden: Host "+r.Host+" is not this machine's loopback name", http.StatusForbidden)
			return
		}
		if o := r.Header.Get("Origin"); o != "" {
			u, err := url.Parse(o)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || !loopback.Host(u.Host) {
				http.Error(w, "forbidden: Origin "+o+" is not a loopback origin", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// Serve serves h (HTTPHandler's, or a composition of Guard and
// StreamHandler) on ln until ctx is done.
func Serve(ctx context.Context, h http.Handler, ln net.Listener) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("mcp http: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	_ = srv.Close() // streams still open (a parked call's) end now
	<-errc
	return nil
}

// IsLoopback reports whether ln listens on a loopback address.
func IsLoopback(ln net.Listener) bool {
	ta, ok := ln.Addr().(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
