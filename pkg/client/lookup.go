package client

import "time"

// maxStoredResultCheck is the longest a waiting call goes without
// looking for its stored result.
const maxStoredResultCheck = time.Minute

// lookupSchedule says when a waiting call looks for its stored result.
// Every look-up is a request a worker answers from the results stream:
// on a cluster, messages between the nodes. A live result is missed
// when the connection was lost meanwhile (a reconnect), when the
// subscription dropped messages (its buffer full), or, rarely, when the
// result was published on a node the subscription's interest had not
// reached yet. The first two are seen here, at each storedResultCheck,
// and looked for at once; for the rest the look-ups back off: the first
// after storedResultCheck, then twice as long each time up to
// maxStoredResultCheck. A call queued for a minute behind a fleet's
// backlog then costs three look-ups, not twelve.
type lookupSchedule struct {
	next       time.Time
	every      time.Duration
	reconnects uint64
	dropped    int
}

// newLookupSchedule starts the schedule of a wait beginning at now on a
// connection that has reconnected reconnects times.
func newLookupSchedule(now time.Time, reconnects uint64) *lookupSchedule {
	return &lookupSchedule{next: now.Add(storedResultCheck), every: storedResultCheck, reconnects: reconnects}
}

// due reports whether a look-up is due at now, given the connection's
// reconnects and the messages the call's subscriptions dropped so far;
// when one is, the next is scheduled.
func (s *lookupSchedule) due(now time.Time, reconnects uint64, dropped int) bool {
	missed := reconnects != s.reconnects || dropped != s.dropped
	if !missed && now.Before(s.next) {
		return false
	}
	s.reconnects, s.dropped = reconnects, dropped
	if missed {
		s.every = storedResultCheck
	}
	s.every = min(2*s.every, maxStoredResultCheck)
	s.next = now.Add(s.every)
	return true
}
