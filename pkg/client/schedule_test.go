package client

import (
	"testing"
	"time"
)

// TestLookupSchedule: a waiting call looks for its stored result after
// storedResultCheck, then twice as long each time up to
// maxStoredResultCheck; after a reconnect or a dropped message it looks
// at the next check and starts backing off again.
func TestLookupSchedule(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	type check struct {
		at         int // seconds into the wait
		reconnects uint64
		dropped    int
		due        bool
	}
	for _, tc := range []struct {
		name   string
		checks []check
	}{
		{"backs off to a minute", []check{
			{at: 5, due: true}, {at: 10}, {at: 15, due: true}, {at: 30}, {at: 35, due: true},
			{at: 70}, {at: 75, due: true}, {at: 130}, {at: 135, due: true}, {at: 190}, {at: 195, due: true},
		}},
		{"a reconnect looks at once", []check{
			{at: 5, due: true}, {at: 10, reconnects: 1, due: true}, {at: 15, reconnects: 1},
			{at: 20, reconnects: 1, due: true}, {at: 25, reconnects: 1},
		}},
		{"a dropped message looks at once", []check{
			{at: 5, due: true}, {at: 10}, {at: 12, dropped: 3, due: true}, {at: 17, dropped: 3},
			{at: 22, dropped: 3, due: true}, {at: 27, dropped: 4, due: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newLookupSchedule(t0, 0)
			for _, c := range tc.checks {
				if got := s.due(at(c.at), c.reconnects, c.dropped); got != c.due {
					t.Fatalf("at %ds (reconnects %d, dropped %d): due %v, want %v", c.at, c.reconnects, c.dropped, got, c.due)
				}
			}
		})
	}
}
