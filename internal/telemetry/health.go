package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Endpoints serves /metrics (Prometheus text), /healthz (the process is
// alive, and its build) and /readyz (ready() returns nil: connected and taking work).
func Endpoints(prom http.Handler, ready func() error) http.Handler {
	mux := http.NewServeMux()
	if prom != nil {
		mux.Handle("GET /metrics", prom)
	}
	mux.HandleFunc("GET /healthz", Healthz)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready:", err)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// Serve listens on addr and serves h until ctx is done. It returns the
// address it listens on (addr may name port 0) once listening, and the
// error of a failed listen.
func Serve(ctx context.Context, addr string, h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the process keeps running without its metrics endpoint
		}
	}()
	return ln.Addr().String(), nil
}
