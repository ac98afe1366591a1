"""The schedule of a waiting call's look-ups of its stored result, on an
injected clock (seconds into the wait): after 5 s, then 10, 20, 40, at
most 60 s apart; after a reconnect at the next check, backing off again
from there."""

from __future__ import annotations

import unittest
from typing import NamedTuple

from toolgate._lookup import LookupSchedule


class Check(NamedTuple):
    at: float
    due: bool = False
    reconnects: int = 0
    dropped: int = 0


CASES: dict[str, list[Check]] = {
    "backs off to a minute": [
        Check(5, True), Check(10), Check(15, True), Check(30), Check(35, True),
        Check(70), Check(75, True), Check(130), Check(135, True), Check(190), Check(195, True),
    ],
    "a reconnect looks at once": [
        Check(5, True), Check(10, True, reconnects=1), Check(15, reconnects=1),
        Check(20, True, reconnects=1), Check(25, reconnects=1),
    ],
    "a reconnect during the backoff starts it again": [
        Check(5, True), Check(15, True), Check(35, True), Check(40, True, reconnects=2),
        Check(45, reconnects=2), Check(50, True, reconnects=2), Check(65, reconnects=2), Check(70, True, reconnects=2),
    ],
    "a dropped message looks at once": [
        Check(5, True), Check(10), Check(12, True, dropped=3), Check(17, dropped=3),
        Check(22, True, dropped=3), Check(27, True, dropped=4),
    ],
}


class LookupScheduleTest(unittest.TestCase):
    def test_schedule(self) -> None:
        t0 = 1_000_000.0
        for name, checks in CASES.items():
            with self.subTest(name):
                s = LookupSchedule(t0, 0)
                for c in checks:
                    got = s.due(t0 + c.at, c.reconnects, c.dropped)
                    self.assertEqual(got, c.due, f"at {c.at}s (reconnects {c.reconnects}, dropped {c.dropped})")

    def test_reconnects_before_the_wait_do_not_count(self) -> None:
        s = LookupSchedule(0.0, 7)
        self.assertFalse(s.due(1.0, 7))
        self.assertTrue(s.due(5.0, 7))


if __name__ == "__main__":
    unittest.main()
