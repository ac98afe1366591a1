package approver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
)

// recordHandler passes every log record to a channel.
type recordHandler struct{ recs chan slog.Record }

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.recs <- r:
	default:
	}
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

// TestServeSaysWhenNATSIsAway: an approver started before any NATS server
// says at once that it cannot reach it, naming the URL, then keeps trying
// and serves as soon as a server appears.
func TestServeSaysWhenNATSIsAway(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there now
	url := "nats://" + ln.Addr().String()

	recs := make(chan slog.Record, 1000)
	ready := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, Options{NATSURL: url, Listen: "127.0.0.1:0", DataDir: t.TempDir(),
			Logger: slog.New(recordHandler{recs}), Out: io.Discard, Ready: func(a string) { ready <- a }})
	}()
	t.Cleanup(func() {
		cancel()
		testenv.Recv(t, done, "done")
	})

	// The first thing it says is that NATS is away, and where it looked.
	deadline := time.After(60 * time.Second)
	select {
	case r := <-recs:
		var sawURL bool
		r.Attrs(func(a slog.Attr) bool {
			sawURL = sawURL || (a.Key == "url" && a.Value.String() == url)
			return true
		})
		if r.Level != slog.LevelWarn || !strings.Contains(r.Message, "cannot reach NATS") || !sawURL {
			t.Fatalf("first log record = %s %q, want a warning naming %s", r.Level, r.Message, url)
		}
	case <-ready:
		t.Fatal("ready without NATS")
	case err := <-done:
		t.Fatalf("Serve gave up instead of retrying: %v", err)
	case <-deadline:
		t.Fatal("nothing said about the missing NATS server")
	}

	// A server appears on that port: the approver connects and serves.
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	// Approvers read the bus the workers provision: provision it as the
	// first worker would.
	pnc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer pnc.Close()
	pjs, _ := jetstream.New(pnc)
	if err := bus.Provision(ctx, pjs, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Serve ended: %v", err)
	case <-deadline:
		t.Fatal("the approver did not come up once NATS did")
	}
}

// TestServeSaysWhenItsPortIsTaken: a taken HTTP port is an error at once,
// naming the address, even while NATS is away (nothing is retried).
func TestServeSaysWhenItsPortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	done := make(chan error, 1)
	go func() {
		done <- Serve(context.Background(), Options{NATSURL: "nats://127.0.0.1:1", Listen: taken.Addr().String(),
			DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Out: io.Discard})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), taken.Addr().String()) {
			t.Fatalf("Serve = %v, want the taken address", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Serve kept going on a taken port")
	}
}
