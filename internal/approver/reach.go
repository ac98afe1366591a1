package approver

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// reach watches the approver's connection to NATS so that a server that
// cannot be reached is said at once, while the connection keeps retrying
// with backoff (a worker started later is found without a restart).
type reach struct {
	url      string
	log      *slog.Logger
	up       chan struct{}
	upOnce   sync.Once
	failures atomic.Int64
}

func newReach(url string, log *slog.Logger) *reach {
	return &reach{url: url, log: log, up: make(chan struct{})}
}

// maxRetryDelay bounds the backoff between connection attempts.
const maxRetryDelay = 5 * time.Second

// options are the connection options reach needs: it hears of every
// failed attempt and of the connection coming up, and spaces attempts
// 250ms, 500ms, 1s, ... up to maxRetryDelay.
func (r *reach) options() []nats.Option {
	return []nats.Option{
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ConnectHandler(func(*nats.Conn) { r.connected() }),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { r.failed(err) }),
		nats.CustomReconnectDelay(func(attempts int) time.Duration {
			d := 250 * time.Millisecond << min(max(attempts-1, 0), 8) // attempts counts from 1
			return min(d, maxRetryDelay)
		}),
	}
}

func (r *reach) connected() {
	r.upOnce.Do(func() {
		if r.failures.Load() > 0 {
			r.log.Info("connected to NATS", "url", r.url)
		}
		close(r.up)
	})
}

// failed logs the first failure, then every tenth, so a server that stays
// away is neither silent nor a flood.
func (r *reach) failed(err error) {
	if n := r.failures.Add(1); n == 1 || n%10 == 0 {
		r.log.Warn("cannot reach NATS; retrying (is a worker running? start one with `go run ./cmd/worker`, or pass --nats URL)",
			"url", r.url, "err", err, "attempts", n)
	}
}

// wait returns once nc is connected, or with ctx's error. A connection
// that is not up when wait starts is reported at once.
func (r *reach) wait(ctx context.Context, nc *nats.Conn) error {
	if nc.IsConnected() {
		r.connected()
		return nil
	}
	err := nc.LastError()
	if err == nil {
		err = nats.ErrNoServers
	}
	r.failed(err)
	select {
	case <-r.up:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
