package testenv

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server is a real embedded nats-server with JetStream for tests.
type Server struct {
	*server.Server
	Dir string
}

// StartNATS starts an embedded nats-server with JetStream on a random
// loopback port, storing in dir (a fresh temp dir when empty). It is shut
// down when the test ends.
func StartNATS(t testing.TB, dir string) *Server {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	s := startNATS(t, dir, -1)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// RestartNATS shuts s down and starts a new server on the same port and
// store, as after a crash and restart of the broker.
func RestartNATS(t testing.TB, s *Server) *Server {
	t.Helper()
	p := s.Server.Addr()
	s.Shutdown()
	s.WaitForShutdown()
	ns := startNATS(t, s.Dir, tcpPort(p))
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

func startNATS(t testing.TB, dir string, port int) *Server {
	t.Helper()
	opts := &server.Options{
		Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir,
		NoLog: true, NoSigs: true, MaxPayload: 8 << 20,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server did not become ready")
	}
	return &Server{Server: s, Dir: dir}
}

// Connect opens a client connection to s, closed when the test ends.
func (s *Server) Connect(t testing.TB, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(s.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}
