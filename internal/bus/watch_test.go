package bus_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
)

// TestWatchKV proves WatchKV delivers the entries already stored, then the
// nil marker, then the changes under its filter and only those.
func TestWatchKV(t *testing.T) {
	s := testenv.StartNATS(t, "")
	_, js := s.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "watch_test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "a.1", []byte("one")); err != nil {
		t.Fatal(err)
	}
	type update struct {
		key string
		op  jetstream.KeyValueOp
	}
	got := make(chan update, 16)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		bus.WatchKV(wctx, kv, "a.>", slog.New(slog.DiscardHandler), func(e jetstream.KeyValueEntry) {
			if e == nil {
				got <- update{}
				return
			}
			got <- update{e.Key(), e.Operation()}
		})
	}()
	next := func() update {
		t.Helper()
		select {
		case u := <-got:
			return u
		case <-ctx.Done():
			t.Fatal("no update")
		}
		return update{}
	}
	want := []update{{"a.1", jetstream.KeyValuePut}, {}}
	for _, w := range want {
		if u := next(); u != w {
			t.Fatalf("got %+v, want %+v", u, w)
		}
	}
	// b.1 is stored before a.2: were it delivered, it would come first.
	if _, err := kv.Put(ctx, "b.1", []byte("other")); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "a.2", []byte("two")); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "a.1"); err != nil {
		t.Fatal(err)
	}
	for _, w := range []update{{"a.2", jetstream.KeyValuePut}, {"a.1", jetstream.KeyValueDelete}} {
		if u := next(); u != w {
			t.Fatalf("got %+v, want %+v", u, w)
		}
	}
	stop()
	testenv.Recv(t, done, "done")
}
