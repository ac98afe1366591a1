package worker

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/tools"
)

// TestReadyOnlyWhileTakingCalls: /readyz's answer is not ready before the
// consumer is bound, ready while taking calls, and not ready while
// draining, with a call still running.
func TestReadyOnlyWhileTakingCalls(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	started := make(chan string, 1)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w, err := New(nc, tools.NewPipeline(testRegistry(t, &ctr, started)),
		Config{Bus: fastBus, ShutdownGrace: time.Minute, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Ready(); err == nil || !strings.Contains(err.Error(), "provisioning") {
		t.Fatalf("before Run: %v", err)
	}
	ready := make(chan struct{})
	w.OnReady(func() { close(ready) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-ready
	if err := w.Ready(); err != nil {
		t.Fatalf("taking calls: %v", err)
	}
	c, _ := newClient(t, s, "ready")
	if _, err := c.Submit(ctxT(t), "sleep", map[string]any{"ms": 3000}); err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	for end := time.Now().Add(30 * time.Second); ; {
		err := w.Ready()
		if err != nil && strings.Contains(err.Error(), "draining") {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("after the stop signal: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) with a call still running", err)
	default:
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if calls, runs := ctr.total(); calls != 1 || runs != 1 {
		t.Fatalf("%d calls ran %d times, want the one call finished once", calls, runs)
	}
}
