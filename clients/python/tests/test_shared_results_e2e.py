"""The cluster's share of a waiting call, against a real worker: a
client's waiting calls share one subscription to their agent's results,
and a result the subscription missed is still found by a look-up."""

from __future__ import annotations

import asyncio
import os
import unittest

import toolgate

import fleet

N = 5


class SharedResultsTest(fleet.FleetCase):
    AGENT = "py-sharer"

    def result_subs(self) -> int:
        prefix = f"toolgate.result.{self.client.agent}."
        return sum(1 for s in self.client.connection._subs.values() if s.subject.startswith(prefix))

    async def parked(self, command: str) -> toolgate.Call:
        pending: list[toolgate.Result] = []
        call = await self.client.start("bash", {"command": command}, on_pending=pending.append)
        for _ in range(600):
            if pending:
                return call
            await asyncio.sleep(0.05)
        self.fail(f"{command!r} was never parked")

    async def test_concurrent_waiting_calls_share_one_results_subscription(self) -> None:
        calls = [await self.parked(f"touch shared-{i}.txt") for i in range(N)]
        waits = [asyncio.ensure_future(c.result(timeout=120)) for c in calls]
        await asyncio.sleep(0)
        self.assertEqual(self.result_subs(), 1)
        for c in calls:
            await asyncio.to_thread(self.fleet.approve, c.id)
        results = await asyncio.gather(*waits)
        for i, (c, r) in enumerate(zip(calls, results)):
            self.assertEqual(r.status, toolgate.Status.OK, r)
            self.assertEqual(r.call_id, c.id)
            self.assertTrue(os.path.exists(os.path.join(self.fleet.workspace, f"shared-{i}.txt")))
        self.assertEqual(self.result_subs(), 1)
        self.assertEqual(self.client.refused, 0)

    async def test_a_result_published_while_nobody_waited_is_found_by_a_look_up(self) -> None:
        call_id = await self.client.submit("bash", {"command": "touch missed.txt"})
        for _ in range(600):
            try:
                if (await self.client.result(call_id)).status == "pending":
                    break
            except toolgate.NoResult:
                pass
            await asyncio.sleep(0.05)
        await asyncio.to_thread(self.fleet.approve, call_id)
        for _ in range(600):
            if (await self.client.result(call_id)).status == "ok":
                break
            await asyncio.sleep(0.05)
        # The same id again is stored once and never run twice: its live
        # result was published while no call waited, only a look-up finds it.
        call = await self.client.start("bash", {"command": "touch missed.txt"}, call_id=call_id)
        r = await call.result(timeout=120)
        self.assertEqual(r.status, toolgate.Status.OK, r)
        self.assertEqual(r.call_id, call_id)
        self.assertEqual(self.client.refused, 0)


if __name__ == "__main__":
    unittest.main()
