package bus

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// watchRetry is how long WatchKV waits before opening a watch again after
// opening it failed.
const watchRetry = 250 * time.Millisecond

// WatchKV watches the keys of kv matching filter and calls fn with every
// update, re-opening the watch whenever it ends (as when the server
// restarts) until ctx does. Each watch it opens first delivers the entries
// already stored, then a nil entry saying they are all in, then the
// changes. fn runs on WatchKV's goroutine, one update at a time.
func WatchKV(ctx context.Context, kv jetstream.KeyValue, filter string, log *slog.Logger, fn func(jetstream.KeyValueEntry)) {
	for ctx.Err() == nil {
		w, err := kv.Watch(ctx, filter)
		if err != nil {
			log.Debug("watch", "filter", filter, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(watchRetry):
			}
			continue
		}
	loop:
		for {
			select {
			case <-ctx.Done():
				break loop
			case e, ok := <-w.Updates():
				if !ok {
					break loop
				}
				fn(e)
			}
		}
		_ = w.Stop()
	}
}
