package embedded

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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
	done := make(chan error, 1)
	go func() {
		s, err := Start(Config{Listen: addr, DataDir: t.TempDir()})
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
	s, err := Start(Config{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}
