"""The Python client against a real worker: built from this repository,
on its embedded NATS server, with credentials minted by toolctl."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import unittest

import toolgate
from toolgate import _nats, _nkeys
from toolgate.client import Credentials

import fleet


class E2ETest(fleet.FleetCase):
    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        with open(os.path.join(cls.fleet.workspace, "hello.txt"), "w") as f:
            f.write("hello from the workspace\n")

    async def test_read_returns_the_file(self) -> None:
        r = await self.client.call("read", {"path": "hello.txt"}, timeout=30)
        self.assertEqual(r.status, toolgate.Status.OK, r)
        self.assertIn("hello from the workspace", r.output)
        self.assertEqual(r.decision.action, toolgate.Action.ALLOW)
        self.assertEqual(r.decision.action, "allow")
        self.assertEqual(r.agent, "py-agent")

    async def test_structured_mode(self) -> None:
        c = await toolgate.Client.connect(self.fleet.url, creds=self.creds, mode="structured")
        try:
            r = await c.call("read", {"path": "hello.txt"})
        finally:
            await c.close()
        self.assertEqual(r.status, "ok", r)
        self.assertIn("hello from the workspace", r.output)

    async def test_denied_bash_names_the_rule(self) -> None:
        r = await self.client.call("bash", {"command": "sudo touch /made-by-sudo"}, timeout=30)
        self.assertEqual(r.status, toolgate.Status.DENIED, r)
        self.assertEqual(r.decision.action, toolgate.Action.DENY)
        self.assertEqual(r.decision.rule, "builtin.classify.forbidden")
        self.assertFalse(os.path.exists("/made-by-sudo"))

    async def test_ask_parks_and_resumes_after_approval(self) -> None:
        marker = os.path.join(self.fleet.workspace, "approved.txt")
        pending: list[toolgate.Result] = []
        call = await self.client.start("bash", {"command": "touch approved.txt"}, on_pending=pending.append)
        for _ in range(200):
            if pending:
                break
            await asyncio.sleep(0.05)
        self.assertEqual([p.status for p in pending], [toolgate.Status.PENDING])
        self.assertEqual(pending[0].decision.action, toolgate.Action.ASK)
        self.assertFalse(os.path.exists(marker), "the parked call ran before anyone approved it")
        stored = await self.client.result(call.id)
        self.assertEqual(stored.status, toolgate.Status.PENDING)
        await asyncio.to_thread(self.fleet.approve, call.id)
        r = await call.result(timeout=60)
        self.assertEqual(r.status, toolgate.Status.OK, r)
        self.assertTrue(os.path.exists(marker))
        self.assertTrue(r.decision.approvers, r.decision)

    async def test_cancelled_sleep_ends_cancelled(self) -> None:
        call = await self.client.start("bash", {"command": "sleep 30 && touch slept.txt"}, timeout=60)
        for _ in range(100):
            reply = await self.client.cancel(call.id)
            if reply.state == "running":
                break
            await asyncio.sleep(0.1)  # queued: wait until a worker holds it
        r = await call.result(timeout=30)
        self.assertEqual(r.status, toolgate.Status.CANCELLED, r)
        self.assertFalse(os.path.exists(os.path.join(self.fleet.workspace, "slept.txt")))

    async def test_cancelling_the_task_cancels_the_call(self) -> None:
        task = asyncio.ensure_future(self.client.call("bash", {"command": "sleep 30"}, call_id="py-task-cancel"))
        await asyncio.sleep(1)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        r = await self.client.wait("py-task-cancel", timeout=30)
        self.assertEqual(r.status, toolgate.Status.CANCELLED, r)

    async def test_progress(self) -> None:
        call = await self.client.start("bash", {"command": "echo line1; sleep 0.5; echo line2; sleep 0.5; echo line3"})

        async def collect() -> list[str]:
            return [p.chunk async for p in call.progress()]

        chunks = await asyncio.wait_for(collect(), 60)
        r = await call.result()
        self.assertEqual(r.status, toolgate.Status.OK, r)
        self.assertIn("line3", "".join(chunks))

    async def test_progress_of_a_submitted_call(self) -> None:
        call_id = await self.client.submit("bash", {"command": "sleep 0.5; echo first; sleep 0.5; echo second"})

        async def collect() -> str:
            return "".join([p.chunk async for p in self.client.progress(call_id)])

        out = await asyncio.wait_for(collect(), 60)
        self.assertIn("second", out)
        r = await self.client.wait(call_id, timeout=30)
        self.assertEqual(r.status, toolgate.Status.OK, r)

    async def test_result_stored_while_away(self) -> None:
        call_id = await self.client.submit("bash", {"command": "sleep 1; echo done-while-away"})
        await self.client.close()
        await asyncio.sleep(2)
        self.client = await toolgate.Client.connect(self.fleet.url, creds=self.creds)
        r = await self.client.wait(call_id, timeout=30)
        self.assertEqual(r.status, toolgate.Status.OK, r)
        self.assertIn("done-while-away", r.output)

    async def test_result_published_during_a_disconnect_is_fetched_on_reconnect(self) -> None:
        nc = self.client.connection
        call = await self.client.start("bash", {"command": "sleep 1; echo across-the-gap"})
        servers = nc._servers
        nc._servers = [("127.0.0.1", 1)]  # nothing listens: the reconnect waits
        assert nc._writer is not None
        nc._writer.transport.abort()
        await asyncio.sleep(3)  # the result is published and stored meanwhile
        self.assertFalse(call._w.result.done())
        nc._servers = servers
        r = await call.result(timeout=30)
        self.assertEqual(r.status, toolgate.Status.OK, r)
        self.assertIn("across-the-gap", r.output)
        self.assertGreaterEqual(nc.reconnects, 1)

    async def test_result_cosigned_with_its_audit_event(self) -> None:
        """A worker signs a call's result and its audit event with one
        signature: the stored result carries the co-signed form, verifies,
        and any change of its inclusion proof is refused."""
        r = await self.client.call("read", {"path": "hello.txt"})
        raw = await self.client._nc.request(f"toolgate.api.result.py-agent.{r.call_id}", b"")
        sig = raw.headers["ce-toolgatesig"]
        parts = sig.split(".")
        self.assertEqual(len(parts), 5, f"not co-signed: {sig}")
        self.assertGreaterEqual(int(parts[2]), 2)
        v = self.client._verifier
        self.assertEqual(v.result(raw.headers, raw.data, "py-agent", r.call_id)["output"], r.output)
        for i, changed in ((1, str(int(parts[2]))), (2, "1"), (2, "0" + parts[2]), (3, "A" * 22), (4, "A" * len(parts[4]))):
            forged = ".".join(parts[:i] + [changed] + parts[i + 1 :])
            with self.assertRaises(toolgate.Refused) as cm:
                v.result({**raw.headers, "ce-toolgatesig": forged}, raw.data, "py-agent", r.call_id)
            self.assertEqual(cm.exception.reason, "bad-signature", forged)

    async def test_tools_listing(self) -> None:
        tools = await self.client.tools()
        names = {t["name"] for t in tools}
        self.assertTrue({"read", "bash", "grep"} <= names, names)

    async def test_sync_client(self) -> None:
        def run() -> toolgate.Result:
            with toolgate.SyncClient.connect(self.fleet.url, creds=self.creds) as c:
                return c.call("read", {"path": "hello.txt"})

        r = await asyncio.to_thread(run)
        self.assertEqual(r.status, toolgate.Status.OK)

    async def test_example_runs(self) -> None:
        example = os.path.join(os.path.dirname(__file__), "..", "examples", "call_tools.py")
        p = await asyncio.create_subprocess_exec(
            sys.executable, example, "--url", self.fleet.url, "--creds", self.creds, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        out, _ = await asyncio.wait_for(p.communicate(), 120)
        self.assertEqual(p.returncode, 0, out.decode())
        self.assertIn("sudo: denied (deny by builtin.classify.forbidden", out.decode())
        self.assertIn("result: ok", out.decode())

    async def test_wrong_creds_refused(self) -> None:
        approver = self.fleet.creds("approver", "py-approver")
        with self.assertRaises(toolgate.CredentialsError):
            await toolgate.Client.connect(self.fleet.url, creds=approver)

    async def test_forged_results_are_refused(self) -> None:
        """Results no trusted worker made for this call - unsigned, signed by
        an agent's own key, another agent's real result replayed onto this
        call - published on the victim's result subject (as a worker's
        connection can) are refused; the real result still arrives."""
        mallory = await toolgate.Client.connect(self.fleet.url, creds=self.fleet.creds("agent", "py-mallory"))
        try:
            own = await mallory.call("read", {"path": "hello.txt"})
            raw = await mallory._nc.request(f"toolgate.api.result.py-mallory.{own.call_id}", b"")
        finally:
            await mallory.close()
        wcreds = creds_of(self.fleet.creds("worker", "py-forger"))
        forger = _nats.Connection()
        await forger.connect(self.fleet.url, jwt=wcreds[0], sign=wcreds[1].sign, inbox_prefix="_INBOX.worker.py-forger")
        refused0 = self.client.refused
        call = await self.client.start("bash", {"command": "touch victim.txt"})  # asks: parked
        subject = f"toolgate.result.py-agent.{call.id}"
        forged = {"call_id": call.id, "agent": "py-agent", "tool": "bash", "status": "ok", "output": "forged", "is_error": False, "duration_ms": 1}
        body = json.dumps(forged).encode()
        base = {"ce-specversion": "1.0", "ce-id": f"py-agent.{call.id}:result", "ce-source": "toolgate://worker/w1",
                "ce-type": "dev.toolgate.call.completed.v1", "ce-subject": call.id, "content-type": "application/json"}
        # unsigned
        forger.publish(subject, body, headers=base)
        # signed by the agent's own key, presenting its own JWT
        from toolgate import _events

        agent = Credentials.load(self.creds)
        ev = _events.decode(base, body)
        sig = base64.urlsafe_b64encode(agent.key.sign(_events.signing_input(ev))).decode().rstrip("=")
        forger.publish(subject, body, headers={**base, "ce-toolgatesig": sig, "ce-toolgatesigner": agent.jwt})
        # another agent's result, signed by the real worker, replayed here
        forger.publish(subject, raw.data, headers=raw.headers)
        await forger.flush()
        await forger.close()
        for _ in range(100):
            if self.client.refused - refused0 >= 3:
                break
            await asyncio.sleep(0.05)
        self.assertEqual(self.client.refused - refused0, 3)
        self.assertFalse(call._w.result.done(), "a forged result ended the call")
        await asyncio.to_thread(self.fleet.approve, call.id)
        r = await call.result(timeout=60)
        self.assertEqual(r.status, toolgate.Status.OK, r)
        self.assertNotEqual(r.output, "forged")
        self.assertTrue(os.path.exists(os.path.join(self.fleet.workspace, "victim.txt")))


def creds_of(path: str) -> tuple[str, _nkeys.KeyPair]:
    """The JWT and key of any role's .creds file."""
    with open(path) as f:
        return _nkeys.parse_creds(f.read())


if __name__ == "__main__":
    unittest.main()
