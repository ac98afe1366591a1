package identity

import "github.com/nats-io/jwt/v2"

// JetStreamLimits bound what the toolgate account may keep in JetStream,
// so that no caller fills the servers' disks or memory through it. A zero
// field takes DefaultJetStreamLimits'; -1 means unlimited.
type JetStreamLimits struct {
	// DiskStorage is the bytes of file storage over all streams.
	DiskStorage int64
	// MemoryStorage is the bytes of memory storage over all streams.
	MemoryStorage int64
	// Streams is the number of streams (KV buckets included).
	Streams int64
	// Consumers is the number of consumers, ephemeral ones (watchers,
	// ordered consumers) included.
	Consumers int64
	// MaxAckPending bounds one consumer's unacknowledged messages.
	MaxAckPending int64
}

// DefaultJetStreamLimits are the toolgate account's limits when none are
// given: room for toolgate's 7 streams and 7 buckets several times over,
// a task consumer per agent plus every watcher, and the workers'
// consumer's 4096 calls in flight.
var DefaultJetStreamLimits = JetStreamLimits{
	DiskStorage:   8 << 30,
	MemoryStorage: 1 << 30,
	Streams:       64,
	Consumers:     4096,
	MaxAckPending: 16384,
}

func (l JetStreamLimits) withDefaults() JetStreamLimits {
	d := DefaultJetStreamLimits
	for _, f := range []struct{ v, def *int64 }{
		{&l.DiskStorage, &d.DiskStorage}, {&l.MemoryStorage, &d.MemoryStorage}, {&l.Streams, &d.Streams},
		{&l.Consumers, &d.Consumers}, {&l.MaxAckPending, &d.MaxAckPending},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	return l
}

func (l JetStreamLimits) jwt() jwt.JetStreamLimits {
	return jwt.JetStreamLimits{DiskStorage: l.DiskStorage, MemoryStorage: l.MemoryStorage,
		Streams: l.Streams, Consumer: l.Consumers, MaxAckPending: l.MaxAckPending}
}

// SetLimits sets the toolgate account's JetStream limits and issues its
// JWT again.
func (in *Install) SetLimits(l JetStreamLimits) error {
	in.mu.Lock()
	in.Limits, in.issued = l, nil
	in.mu.Unlock()
	_, err := in.JWTs()
	return err
}

// EffectiveLimits are the limits the toolgate account's JWT carries.
func (in *Install) EffectiveLimits() JetStreamLimits {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.Limits.withDefaults()
}
