package embedded_test

import (
	"bytes"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/embedded"
	"github.com/toolgate/toolgate/internal/identity"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestRefusalsAreLogged: the embedded server refuses a client without
// credentials and an agent reaching for others' traffic, and says so in
// the worker's log.
func TestRefusalsAreLogged(t *testing.T) {
	dir := t.TempDir()
	in, err := identity.LoadOrCreate(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuf
	srv, err := embedded.Start(embedded.Config{Listen: "127.0.0.1:0", DataDir: dir, Install: in,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := nats.Connect(srv.ClientURL()); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("connect without credentials: %v", err)
	}
	c, _ := in.MintCreds(identity.RoleAgent, "spy")
	nc, err := nats.Connect(srv.ClientURL(), c.NATSOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_, _ = nc.SubscribeSync("_INBOX.>")
	_ = nc.Publish("toolgate.result.victim.c1", []byte("forged"))
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The server logs before it answers the flush's PING.
	out := logs.String()
	for _, want := range []string{"authentication error", `Subscription Violation - Subject \"_INBOX.>\"`,
		`Publish Violation - Subject \"toolgate.result.victim.c1\"`, "level=ERROR", "component=nats-server"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}
