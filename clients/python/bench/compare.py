"""Calls/s of the Python client beside the Go client's, against one worker:
a worker built from this repository on its embedded NATS server (temp
directories, as the tests start it), one agent's credentials minted with
toolctl, and each client making --n read calls with --inflight in flight,
in alternate rounds so both see the same machine.

    python bench/compare.py [--n 2000 --inflight 64 --rounds 3]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from fleet import REPO, Fleet, binaries  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--inflight", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    bin_dir = binaries()
    gobench = os.path.join(bin_dir, "clientbench")
    subprocess.run(["go", "build", "-o", gobench, "./test/clientbench"], cwd=REPO, check=True)
    fleet = Fleet(approver=False)
    try:
        creds = fleet.creds("agent", "bench")
        with open(os.path.join(fleet.workspace, "hello.txt"), "w") as f:
            f.write("hello\n")
        common = ["--n", str(a.n), "--inflight", str(a.inflight)]
        for r in range(a.rounds):
            print(f"round {r + 1}", flush=True)
            subprocess.run([gobench, "-url", fleet.url, "-creds", creds, "-n", str(a.n), "-inflight", str(a.inflight)], check=True)
            subprocess.run([sys.executable, str(HERE / "bench.py"), "calls", "--url", fleet.url, "--creds", creds, *common], check=True)
    finally:
        fleet.close()


if __name__ == "__main__":
    main()
