package approver

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	iapproval "github.com/toolgate/toolgate/internal/approval"
)

func listParked(ctx context.Context, kv jetstream.KeyValue) ([]*iapproval.Parked, error) {
	return iapproval.List(ctx, kv)
}
