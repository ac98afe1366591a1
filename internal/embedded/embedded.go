// Package embedded runs nats-server with JetStream inside the worker
// process, the zero-configuration default: toolctl, other workers and the
// approver connect to it like to any NATS server. It runs in operator
// mode: only users issued by the install's toolgate account get in.
package embedded

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolgate/toolgate/internal/identity"
)

// Config says where the embedded server listens and stores, and whom it
// trusts.
type Config struct {
	// Listen is host:port; default 127.0.0.1:4222. Port 0 picks a free one.
	Listen string
	// DataDir holds JetStream's file storage (in DataDir/jetstream);
	// default the state directory.
	DataDir string
	// MaxPayload bounds one message; default 8 MiB.
	MaxPayload int32
	// Install is the operator and accounts the server trusts; required.
	Install *identity.Install
	// Logger receives the server's warnings and errors (refused
	// connections, permissions violations); nil discards them.
	Logger *slog.Logger
}

// Server is a running embedded nats-server.
type Server struct {
	*server.Server
	storeDir string
}

// Start starts the server and waits until it accepts connections.
func Start(cfg Config) (*Server, error) {
	if cfg.Install == nil {
		return nil, errors.New("embedded nats-server: no install keys")
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:4222"
	}
	if cfg.DataDir == "" {
		dir, err := identity.StateDir()
		if err != nil {
			return nil, err
		}
		cfg.DataDir = dir
	}
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = 8 << 20
	}
	host, portStr, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %q: %w", cfg.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("--listen %q: bad port %q", cfg.Listen, portStr)
	}
	if port == 0 {
		port = -1 // nats-server's "random port"
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("--data %q: %w", cfg.DataDir, err)
	}
	store := filepath.Join(dir, "jetstream")
	if err := os.MkdirAll(store, 0o700); err != nil {
		return nil, fmt.Errorf("--data %q: %w", cfg.DataDir, err)
	}
	opts := &server.Options{
		ServerName: "toolgate-embedded",
		Host:       host, Port: port,
		JetStream: true, StoreDir: store,
		MaxPayload: cfg.MaxPayload,
		NoSigs:     true, NoLog: true,
	}
	if err := Trust(opts, cfg.Install); err != nil {
		return nil, err
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	if cfg.Logger != nil {
		s.SetLogger(Logger{cfg.Logger.With("component", "nats-server")}, false, false)
	}
	go s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats-server did not start on %s (is the port in use?)", cfg.Listen)
	}
	return &Server{Server: s, storeDir: store}, nil
}

// Trust puts opts in operator mode for in: the operator is trusted, the
// system account set, and both accounts are preloaded in a memory
// resolver, as deploy's auth.conf does for a cluster.
func Trust(opts *server.Options, in *identity.Install) error {
	oc, err := jwt.DecodeOperatorClaims(in.OperatorJWT)
	if err != nil {
		return fmt.Errorf("operator JWT: %w", err)
	}
	res := &server.MemAccResolver{}
	if err := res.Store(in.SystemPublicKey, in.SystemJWT); err != nil {
		return err
	}
	if err := res.Store(in.AccountPublicKey, in.AccountJWT); err != nil {
		return err
	}
	opts.TrustedOperators = []*jwt.OperatorClaims{oc}
	opts.SystemAccount = in.SystemPublicKey
	opts.AccountResolver = res
	return nil
}

// Logger adapts slog to nats-server's logger: notices at debug level,
// warnings and errors (a refused connection, a permissions violation:
// "Publish Violation", "Subscription Violation") as such.
type Logger struct{ L *slog.Logger }

// Noticef logs at debug level: the server's notices are start-up chatter.
func (l Logger) Noticef(format string, v ...any) { l.L.Debug(fmt.Sprintf(format, v...)) }

// Warnf logs a warning.
func (l Logger) Warnf(format string, v ...any) { l.L.Warn(fmt.Sprintf(format, v...)) }

// Fatalf logs an error; the server stops on its own.
func (l Logger) Fatalf(format string, v ...any) { l.L.Error(fmt.Sprintf(format, v...)) }

// Errorf logs an error.
func (l Logger) Errorf(format string, v ...any) { l.L.Error(fmt.Sprintf(format, v...)) }

// Debugf is not called (debug is off).
func (l Logger) Debugf(string, ...any) {}

// Tracef is not called (trace is off).
func (l Logger) Tracef(string, ...any) {}

// StoreDir is where JetStream keeps its files.
func (s *Server) StoreDir() string { return s.storeDir }

// Close shuts the server down and waits for it.
func (s *Server) Close() {
	s.Shutdown()
	s.WaitForShutdown()
}
