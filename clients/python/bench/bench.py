"""Benchmarks of the Python client.

    python bench/bench.py verify [--n 2000 --repeat 9]
        µs to verify one result (a golden vector of pkg/eventsig, the
        signer's JWT checked once and kept, as in a running client)
    python bench/bench.py calls --url nats://127.0.0.1:4222 --creds agent.creds [--n 3000 --inflight 64]
        calls/s against a running worker with --inflight calls in flight
        (compare: go run ./test/clientbench with the same flags)
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import pathlib
import time
from typing import Any

import toolgate
from toolgate import _events
from toolgate._verify import Verifier

VECTORS = pathlib.Path(__file__).resolve().parents[3] / "pkg" / "eventsig" / "testdata" / "vectors.json"


def _per_call(fn: Any, n: int, repeat: int) -> tuple[float, float]:
    """The fastest and the median of repeat batches of n calls of fn, in
    µs per call (the fastest batch is the one the machine's other load
    disturbed least)."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - t) / n * 1e6)
    times.sort()
    return times[0], times[len(times) // 2]


def bench_verify(n: int, repeat: int) -> None:
    doc = json.loads(VECTORS.read_text())
    for name in ("result, binary mode", "result, structured mode", "co-signed result and audit event, binary mode"):
        vec = next(v for v in doc["vectors"] if v["name"] == name)
        data = base64.b64decode(vec["data"])
        v = Verifier(doc["trusted_accounts"])
        v.result(vec["headers"], data, vec["agent"], vec["call_id"])
        fast, med = _per_call(lambda: v.result(vec["headers"], data, vec["agent"], vec["call_id"]), n, repeat)
        bfast, bmed = _per_call(lambda: json.loads(_events.decode(vec["headers"], data).data), n, repeat)
        print(f"python verify ({name}): {fast:.1f} µs/result (median {med:.1f}); decode only (baseline): {bfast:.1f} µs (median {bmed:.1f}); {repeat} x {n}")


async def bench_calls(url: str, creds: str, n: int, inflight: int, tool: str, args: dict) -> None:
    client = await toolgate.Client.connect(url, creds=creds)
    await client.call(tool, args)  # warm up
    failed = 0
    next_call = 0

    async def worker() -> None:
        nonlocal failed, next_call
        while next_call < n:
            next_call += 1
            r = await client.call(tool, args)
            if r.status != toolgate.Status.OK:
                failed += 1

    t = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(inflight)))
    secs = time.perf_counter() - t
    await client.close()
    print(f"python client: {n} calls, {inflight} in flight, {secs:.2f}s, {n / secs:.0f} calls/s, {failed} failed, {client.refused} refused")


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    v = sub.add_parser("verify")
    v.add_argument("--n", type=int, default=2000)
    v.add_argument("--repeat", type=int, default=9)
    c = sub.add_parser("calls")
    c.add_argument("--url", default=None)
    c.add_argument("--creds", required=True)
    c.add_argument("--n", type=int, default=3000)
    c.add_argument("--inflight", type=int, default=64)
    c.add_argument("--tool", default="read")
    c.add_argument("--args", default='{"path":"hello.txt"}')
    a = ap.parse_args()
    if a.what == "verify":
        bench_verify(a.n, a.repeat)
    else:
        asyncio.run(bench_calls(a.url, a.creds, a.n, a.inflight, a.tool, json.loads(a.args)))


if __name__ == "__main__":
    main()
