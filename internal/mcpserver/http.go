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

// HTTPHandler serves s over Streamable HTTP at Path. When loopback is true
// (the listener is on a loopback address) requests are refused unless
// their Host, and Origin when present, name the loopback host: a web page
// the browser reaches through DNS rebinding must not drive the tools.
// Otherwise a browser request from another origin is refused.
func HTTPHandler(s *Server, loopback bool, log *slog.Logger) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		Logger: log, SessionTimeout: sessionIdle,
	})
	mux := http.NewServeMux()
	mux.Handle(Path, h)
	if loopback {
		return localOnly(mux)
	}
	return http.NewCrossOriginProtection().Handler(mux)
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

// Serve serves s over Streamable HTTP on ln (http://<addr>/mcp) until ctx
// is done. A loopback listener gets the DNS rebinding checks.
func Serve(ctx context.Context, s *Server, ln net.Listener, log *slog.Logger) error {
	loopback := false
	if ta, ok := ln.Addr().(*net.TCPAddr); ok {
		loopback = ta.IP.IsLoopback()
	}
	srv := &http.Server{Handler: HTTPHandler(s, loopback, log), ReadHeaderTimeout: 10 * time.Second}
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
