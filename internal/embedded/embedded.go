// Package embedded runs nats-server with JetStream inside the worker
// process, the zero-configuration default: toolctl, other workers and the
// approver connect to it like to any NATS server. It runs in operator
// mode: only users issued by the install's toolgate and agents accounts
// get in.
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
	lock     *storeLock
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
		dir, err := defaultDataDir()
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
	lock, err := lockStore(dir)
	if err != nil {
		return nil, err
	}
	srv, err := start(cfg, host, port, store)
	if err != nil {
		lock.release()
		return nil, err
	}
	srv.lock = lock
	if err := lock.record(srv.ClientURL()); err != nil {
		srv.Close()
		return nil, fmt.Errorf("--data %q: %w", cfg.DataDir, err)
	}
	return srv, nil
}

// defaultDataDir is the state directory.
func defaultDataDir() (string, error) { return identity.StateDir() }

// start starts the server on store, its lock held.
func start(cfg Config, host string, port int, store string) (*Server, error) {
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
	// nats-server reports a port it cannot listen on only to its logger;
	// the logger passes that on so a taken port is an error at once, not
	// after a wait, and logs refusals to cfg.Logger when set.
	fatal := &serverLog{errc: make(chan error, 1)}
	if cfg.Logger != nil {
		fatal.l = cfg.Logger.With("component", "nats-server")
	}
	s.SetLogger(fatal, false, false)
	go s.Start()
	ready := make(chan bool, 1)
	go func() { ready <- s.ReadyForConnections(15 * time.Second) }()
	select {
	case err := <-fatal.errc:
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats-server cannot listen on %s (another worker running? join its server with --nats nats://%s, or choose another address with --listen and a store of its own with --data): %w", cfg.Listen, cfg.Listen, err)
	case ok := <-ready:
		if !ok {
			s.Shutdown()
			return nil, fmt.Errorf("embedded nats-server did not start on %s within 15s", cfg.Listen)
		}
	}
	return &Server{Server: s, storeDir: store}, nil
}

// Trust puts opts in operator mode for in: the operator is trusted, the
// system account set, and the system, toolgate and agents accounts are
// preloaded in a memory resolver, as deploy's auth.conf does for a
// cluster. A single server must have room for the toolgate account's
// JetStream limits or it refuses JetStream to the account: when opts
// sets no bound of its own, its bounds are the account's.

func Trust(opts *server.Options, in *identity.Install) error {
	j, err := in.JWTs()
	if err != nil {
		return err
	}
	oc, err := jwt.DecodeOperatorClaims(j.Operator)
	if err != nil {
		return fmt.Errorf("operator JWT: %w", err)
	}
	res := &server.MemAccResolver{}
	if err := res.Store(in.SystemPublicKey, j.System); err != nil {
		return err
	}
	if err := res.Store(in.AccountPublicKey, j.Account); err != nil {
		return err
	}
	if err := res.Store(in.AgentsPublicKey, j.Agents); err != nil {
		return err
	}
	lim := in.EffectiveLimits()
	if opts.JetStreamMaxStore == 0 && lim.DiskStorage > 0 {
		opts.JetStreamMaxStore = lim.DiskStorage
	}
	if opts.JetStreamMaxMemory == 0 && lim.MemoryStorage > 0 {
		opts.JetStreamMaxMemory = lim.MemoryStorage
	}
	opts.TrustedOperators = []*jwt.OperatorClaims{oc}
	opts.SystemAccount = in.SystemPublicKey
	opts.AccountResolver = res
	return nil
}

// ErrStart is wrapped by the error of a server that could not start, such
// as one whose port is taken.
var ErrStart = errors.New("nats-server failed")

// serverLog adapts nats-server's logger: the first fatal error goes to
// errc (Start returns it); with l set, notices are logged at debug level
// and warnings and errors (a refused connection, a permissions violation:
// "Publish Violation", "Subscription Violation") as such.
type serverLog struct {
	l    *slog.Logger
	errc chan error
}

func (s *serverLog) Fatalf(format string, v ...any) {
	err := fmt.Errorf("%w: %s", ErrStart, fmt.Sprintf(format, v...))
	for _, a := range v {
		if e, ok := a.(error); ok {
			err = fmt.Errorf("%w: %w", ErrStart, e)
		}
	}
	select {
	case s.errc <- err:
	default:
	}
	if s.l != nil {
		s.l.Error(fmt.Sprintf(format, v...))
	}
}

func (s *serverLog) Noticef(format string, v ...any) {
	if s.l != nil {
		s.l.Debug(fmt.Sprintf(format, v...))
	}
}

func (s *serverLog) Warnf(format string, v ...any) {
	if s.l != nil {
		s.l.Warn(fmt.Sprintf(format, v...))
	}
}

func (s *serverLog) Errorf(format string, v ...any) {
	if s.l != nil {
		s.l.Error(fmt.Sprintf(format, v...))
	}
}

func (s *serverLog) Debugf(string, ...any) {}
func (s *serverLog) Tracef(string, ...any) {}

// StoreDir is where JetStream keeps its files.
func (s *Server) StoreDir() string { return s.storeDir }

// Close shuts the server down, waits for it, and frees its store.
func (s *Server) Close() {
	s.Shutdown()
	s.WaitForShutdown()
	if s.lock != nil {
		s.lock.release()
		s.lock = nil
	}
}
