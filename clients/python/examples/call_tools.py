"""Calls a few tools through toolgate as an agent, and shows what came back.

    go run ./cmd/worker &                                   # embedded NATS + a worker
    go run ./cmd/toolctl creds agent agent-7 --out agent-7.creds
    python examples/call_tools.py --creds agent-7.creds

Each result is verified (signed by a worker of the install) before it is
printed; a denied call says which rule denied it.
"""

from __future__ import annotations

import argparse
import asyncio

import toolgate


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default=None, help="NATS URL (default $NATS_URL, else nats://127.0.0.1:4222)")
    ap.add_argument("--creds", default=None, help="the agent's .creds file (default $TOOLGATE_CREDS)")
    a = ap.parse_args()
    async with await toolgate.Client.connect(a.url, creds=a.creds) as client:
        print("tools:", ", ".join(t["name"] for t in await client.tools()))
        r = await client.call("ls", {}, timeout=30)
        print(f"ls: {r.status} ({r.decision.action} by {r.decision.rule})\n{r.output}")
        r = await client.call("bash", {"command": "sudo true"}, timeout=30)
        print(f"sudo: {r.status} ({r.decision.action} by {r.decision.rule}: {r.decision.reason})")
        call = await client.start("bash", {"command": "echo one; sleep 0.5; echo two"})
        async for p in call.progress():
            print("progress:", p.chunk.rstrip())
        print("result:", (await call.result()).status)


if __name__ == "__main__":
    asyncio.run(main())
