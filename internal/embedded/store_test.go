package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/embedded"
	"github.com/toolgate/toolgate/internal/identity"
)

// startLogged starts an embedded server on dir whose warnings land in logs.
func startLogged(t *testing.T, dir string, in *identity.Install, logs *syncBuf) (*embedded.Server, error) {
	t.Helper()
	return embedded.Start(embedded.Config{Listen: "127.0.0.1:0", DataDir: dir, Install: in,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
}

// fill writes streams, a KV bucket and messages, as a worker does.
func fill(t *testing.T, srv *embedded.Server, in *identity.Install) {
	t.Helper()
	c, _ := in.MintCreds(identity.RoleWorker, "worker")
	nc, err := nats.Connect(srv.ClientURL(), c.NATSOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TOOLGATE_RESULTS", Subjects: []string{"toolgate.result.>"}}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "toolgate_calls"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := js.Publish(ctx, fmt.Sprintf("toolgate.result.a.c%d", i%3), []byte("call")); err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, "c1", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCleanRestartLogsNoWarnings: a server closed cleanly leaves its
// store so that the next start recovers nothing and warns of nothing.
func TestCleanRestartLogsNoWarnings(t *testing.T) {
	dir := t.TempDir()
	in, err := identity.LoadOrCreate(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuf
	srv, err := startLogged(t, dir, in, &logs)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, srv, in)
	srv.Close()
	first := logs.String()
	srv, err = startLogged(t, dir, in, &logs)
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if n := strings.Count(logs.String(), "level=WARN") + strings.Count(logs.String(), "level=ERROR"); n > 0 {
		t.Fatalf("%d warning lines over a clean stop and restart:\nfirst run:\n%s\nall:\n%s", n, first, logs.String())
	}
}

// TestOneServerPerStore: a second server on a store in use refuses to
// start, naming the one running (its pid and address) and how to join
// it; once the first is closed, the store is free again.
func TestOneServerPerStore(t *testing.T) {
	dir := t.TempDir()
	in, err := identity.LoadOrCreate(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuf
	first, err := startLogged(t, dir, in, &logs)
	if err != nil {
		t.Fatal(err)
	}
	_, err = startLogged(t, dir, in, &logs)
	if !errors.Is(err, embedded.ErrStoreInUse) {
		first.Close()
		t.Fatalf("second server on the same store: %v, want ErrStoreInUse", err)
	}
	for _, want := range []string{fmt.Sprintf("pid %d", os.Getpid()), first.ClientURL(), "--nats " + first.ClientURL()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}
	run, ok := embedded.Running(dir)
	if !ok || run.URL != first.ClientURL() || run.PID != os.Getpid() {
		t.Errorf("Running = %+v %v, want pid %d at %s", run, ok, os.Getpid(), first.ClientURL())
	}
	first.Close()
	if _, ok := embedded.Running(dir); ok {
		t.Error("Running reports a closed server")
	}
	again, err := startLogged(t, dir, in, &logs)
	if err != nil {
		t.Fatalf("the store is not free after Close: %v", err)
	}
	again.Close()
}
