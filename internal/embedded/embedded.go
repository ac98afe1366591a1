// Package embedded runs nats-server with JetStream inside the worker
// process, the zero-configuration default: toolctl, other workers and the
// approver connect to it like to any NATS server.
package embedded

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config says where the embedded server listens and stores.
type Config struct {
	// Listen is host:port; default 127.0.0.1:4222. Port 0 picks a free one.
	Listen string
	// DataDir holds JetStream's file storage; default ./.toolgate.
	DataDir string
	// MaxPayload bounds one message; default 8 MiB.
	MaxPayload int32
}

// Server is a running embedded nats-server.
type Server struct {
	*server.Server
	storeDir string
}

// Start starts the server and waits until it accepts connections.
func Start(cfg Config) (*Server, error) {
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:4222"
	}
	if cfg.DataDir == "" {
		cfg.DataDir = ".toolgate"
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
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats-server did not start on %s (is the port in use?)", cfg.Listen)
	}
	return &Server{Server: s, storeDir: store}, nil
}

// StoreDir is where JetStream keeps its files.
func (s *Server) StoreDir() string { return s.storeDir }

// Close shuts the server down and waits for it.
func (s *Server) Close() {
	s.Shutdown()
	s.WaitForShutdown()
}
