package events

import (
	"crypto/rand"
	"encoding/base32"
)

// idEncoding writes ids in lower-case base32 without padding: key- and
// subject-safe, 26 characters for 128 bits.
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewID returns a fresh id of 128 bits from crypto/rand, for the ids that
// act as capabilities: a call id names the subjects its result, progress
// and cancellation travel on, a task id those of its task, so neither
// may be guessable from another.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error (Go 1.24+)
	return idEncoding.EncodeToString(b[:])
}
