package embedded

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/identity"
)

// TestPortTaken: a port in use is reported as such, naming the address,
// straight from the failed listen rather than after the start-up wait.
func TestPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	install := testInstall(t)
	done := make(chan error, 1)
	go func() {
		s, err := Start(Config{Listen: addr, DataDir: t.TempDir(), Install: install})
		if s != nil {
			s.Close()
		}
		done <- err
	}()
	var got error
	select {
	case got = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Start did not return")
	}
	if got == nil {
		t.Fatal("Start succeeded on a taken port")
	}
	// The listen error itself, not a timeout: the wait was cut short.
	if !errors.Is(got, syscall.EADDRINUSE) || !errors.Is(got, ErrStart) {
		t.Fatalf("error does not carry the listen failure: %v", got)
	}
	if !strings.Contains(got.Error(), addr) || !strings.Contains(got.Error(), "--listen") {
		t.Fatalf("error does not name the address and the flag: %v", got)
	}
}

// TestStartAndConnect: a free random port works and takes clients.
func TestStartAndConnect(t *testing.T) {
	in := testInstall(t)
	s, err := Start(Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Install: in})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := nats.Connect(s.ClientURL()); err == nil {
		t.Fatal("an unauthenticated client was let in")
	}
	creds, err := in.MintCreds(identity.RoleAgent, "agent-1")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.ClientURL(), creds.NATSOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}

// testInstall creates the keys of an install in a temp dir.
func testInstall(t *testing.T) *identity.Install {
	t.Helper()
	in, err := identity.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// TestAccountsAndLimits: agents get in to an account of their own,
// without JetStream; the toolgate account's JetStream is bounded by the
// install's limits, not unlimited.
func TestAccountsAndLimits(t *testing.T) {
	in := testInstall(t)
	s, err := Start(Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Install: in})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	connect := func(role identity.Role) *nats.Conn {
		creds, err := in.MintCreds(role, "n-1")
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(s.ClientURL(), creds.NATSOptions()...)
		if err != nil {
			t.Fatalf("%s: %v", role, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	admin, _ := connect(identity.RoleAdmin), connect(identity.RoleAgent)
	if mustLookup(t, s, in.AgentsPublicKey).JetStreamEnabled() {
		t.Error("JetStream is enabled for the agents account")
	}
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ai, err := js.AccountInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := identity.DefaultJetStreamLimits
	if ai.Limits.MaxStore != want.DiskStorage || ai.Limits.MaxMemory != want.MemoryStorage ||
		ai.Limits.MaxStreams != int(want.Streams) || ai.Limits.MaxConsumers != int(want.Consumers) {
		t.Fatalf("toolgate account limits %+v, want %+v", ai.Limits, want)
	}
}

func mustLookup(t *testing.T, s *Server, key string) *server.Account {
	t.Helper()
	acc, err := s.LookupAccount(key)
	if err != nil {
		t.Fatal(err)
	}
	return acc
}
