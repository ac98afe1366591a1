package client

import "github.com/toolgate/toolgate/pkg/events"

// NewCallID returns a fresh call id: 128 bits from crypto/rand
// (events.NewID), so that no one can guess the id of another's next call.
func NewCallID() string { return events.NewID() }
