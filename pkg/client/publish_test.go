package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestPublishOnceRetriesALostAcknowledgement: a publish whose
// acknowledgement never comes (the stream's leader stored the call and
// died) is published again after publishAttempt instead of holding the
// agent until its deadline; any other error ends it at once.
func TestPublishOnceRetriesALostAcknowledgement(t *testing.T) {
	refused := errors.New("refused")
	for _, tc := range []struct {
		name     string
		outcomes []error // per attempt; nil: acknowledged, DeadlineExceeded: the ack lost
		attempts int
		wantErr  error
	}{
		{"acknowledged", []error{nil}, 1, nil},
		{"ack lost once", []error{context.DeadlineExceeded, nil}, 2, nil},
		{"refused", []error{refused, nil}, 1, refused},
		{"no stream leader for a while", []error{jetstream.ErrNoStreamResponse, jetstream.ErrNoStreamResponse, nil}, 3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			err := publishOnce(context.Background(), "c1", func(ctx context.Context) error {
				out := tc.outcomes[n]
				n++
				if errors.Is(out, context.DeadlineExceeded) {
					<-ctx.Done() // no acknowledgement: the attempt's bound ends it
					return ctx.Err()
				}
				return out
			})
			if !errors.Is(err, tc.wantErr) || n != tc.attempts {
				t.Fatalf("err %v after %d attempts, want %v after %d", err, n, tc.wantErr, tc.attempts)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	n := 0
	err := publishOnce(ctx, "c1", func(ctx context.Context) error { n++; <-ctx.Done(); return ctx.Err() })
	if !errors.Is(err, context.DeadlineExceeded) || n != 1 {
		t.Fatalf("the caller's deadline: err %v after %d attempts", err, n)
	}
}
