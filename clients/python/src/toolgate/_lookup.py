"""When a waiting call looks for its stored result (pkg/client's
lookupSchedule)."""

from __future__ import annotations

STORED_RESULT_CHECK = 5.0
"""How often a waiting call checks whether a look-up of its stored result
is due, in seconds, and the first look-up's delay."""

MAX_STORED_RESULT_CHECK = 60.0
"""The longest a waiting call goes without looking for its stored result."""


class LookupSchedule:
    """Says when a waiting call looks for its stored result.

    Every look-up is a request a worker answers from the results stream:
    on a cluster, messages between the nodes. A live result is missed when
    the connection was lost meanwhile (a reconnect), when messages were
    dropped, or, rarely, when the result was published on a node the
    subscription's interest had not reached yet. The first two are seen at
    each check and looked for at once; for the rest the look-ups back off:
    the first after STORED_RESULT_CHECK, then twice as long each time up
    to MAX_STORED_RESULT_CHECK. A call queued for a minute behind a
    fleet's backlog then costs three look-ups, not twelve.
    """

    def __init__(self, now: float, reconnects: int, dropped: int = 0) -> None:
        """A wait beginning at now (seconds, any clock) on a connection that
        has reconnected reconnects times and dropped dropped messages."""
        self._next = now + STORED_RESULT_CHECK
        self._every = STORED_RESULT_CHECK
        self._reconnects = reconnects
        self._dropped = dropped

    def due(self, now: float, reconnects: int, dropped: int = 0) -> bool:
        """Whether a look-up is due at now, given the connection's
        reconnects and the messages dropped so far; when one is, the next
        is scheduled."""
        missed = reconnects != self._reconnects or dropped != self._dropped
        if not missed and now < self._next:
            return False
        self._reconnects, self._dropped = reconnects, dropped
        if missed:
            self._every = STORED_RESULT_CHECK
        self._every = min(2 * self._every, MAX_STORED_RESULT_CHECK)
        self._next = now + self._every
        return True
