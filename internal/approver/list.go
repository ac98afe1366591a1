package approver

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/parking"
)

func listParked(ctx context.Context, kv jetstream.KeyValue) ([]*parking.Parked, error) {
	return parking.List(ctx, kv)
}
