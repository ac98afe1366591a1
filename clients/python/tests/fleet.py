"""A real toolgate install for the tests: the worker, toolctl and approver
binaries built from this repository once, a worker on its embedded NATS
server on a free port, an approver service, temp directories for the
state and the workspace, and credentials minted with `toolctl creds`.

Nothing is mocked. Without Go the tests skip, saying so; under CI=true
they fail instead."""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
from typing import Optional

import toolgate

REPO = pathlib.Path(__file__).resolve().parents[3]
_bin_dir: Optional[str] = None


def need(program: str, package: str) -> str:
    """The path of program; skips the test (fails under CI=true) without it."""
    p = shutil.which(program)
    if p is None:
        msg = f"{program} is not installed (Debian package {package})"
        if os.environ.get("CI") == "true":
            raise AssertionError(msg + "; CI=true needs it")
        raise unittest.SkipTest(msg)
    return p


def binaries() -> str:
    """A directory holding worker, toolctl, approver and
    toolgate-sandbox-init built from this repository ($TOOLGATE_TEST_BIN
    when set: binaries built already)."""
    global _bin_dir
    if os.environ.get("TOOLGATE_TEST_BIN"):
        return os.environ["TOOLGATE_TEST_BIN"]
    if _bin_dir is None:
        go = need("go", "golang-go, or Go from go.dev")
        d = tempfile.mkdtemp(prefix="toolgate-bin-")
        subprocess.run(
            [go, "build", "-o", d + "/", "./cmd/worker", "./cmd/toolctl", "./cmd/approver", "./cmd/toolgate-sandbox-init"],
            cwd=REPO,
            check=True,
        )
        _bin_dir = d
    return _bin_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{what} did not listen on {port} within {timeout}s")


class Fleet:
    """One install: a worker and an approver on temp directories."""

    def __init__(self, approver: bool = True) -> None:
        self.bin = binaries()
        self.tmp = tempfile.mkdtemp(prefix="toolgate-py-")
        self.state = os.path.join(self.tmp, "xdg", "toolgate")
        self.workspace = os.path.join(self.tmp, "ws")
        os.makedirs(self.state, mode=0o700)
        os.makedirs(self.workspace)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_") and k not in ("NATS_URL",)}
        self.env.update(XDG_STATE_HOME=os.path.join(self.tmp, "xdg"), XDG_CONFIG_HOME=os.path.join(self.tmp, "conf"), TOOLGATE_STATE_DIR=self.state)
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.logs: list[str] = []
        try:
            self._up(approver)
        except BaseException:
            self.close()
            raise

    def _up(self, approver: bool) -> None:
        self.worker = self._start("worker", "--listen", f"127.0.0.1:{self.port}", "--workspace", self.workspace, "--data", os.path.join(self.tmp, "data"), "--name", "w1")
        self.wait_ready()
        self.approver_url = ""
        if approver:
            aport = free_port()
            self.approver_url = f"http://127.0.0.1:{aport}"
            p = self._start("approver", "--listen", f"127.0.0.1:{aport}", "--nats", self.url)
            wait_port(aport, p, "the approver")

    def wait_ready(self, timeout: float = 60) -> None:
        """Waits until the worker answers a tool listing."""
        wait_port(self.port, self.worker, "the worker")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = subprocess.run([os.path.join(self.bin, "toolctl"), "tools", "--json"], env={**self.env, "NATS_URL": self.url}, capture_output=True, text=True, timeout=30)
            if p.returncode == 0 and '"read"' in p.stdout:
                return
            time.sleep(0.2)
        raise AssertionError(f"the worker did not list its tools within {timeout}s:\n{self.logs_text()}")

    def _start(self, prog: str, *args: str) -> subprocess.Popen:
        log = os.path.join(self.tmp, prog + ".log")
        self.logs.append(log)
        f = open(log, "wb")
        p = subprocess.Popen([os.path.join(self.bin, prog), *args], env=self.env, stdout=f, stderr=subprocess.STDOUT, cwd=self.tmp)
        f.close()
        self.procs.append(p)
        return p

    def toolctl(self, *args: str, check: bool = True) -> str:
        """Runs toolctl against this install; returns its standard output."""
        p = subprocess.run([os.path.join(self.bin, "toolctl"), *args], env={**self.env, "NATS_URL": self.url}, capture_output=True, text=True, timeout=60)
        if check and p.returncode != 0:
            raise AssertionError(f"toolctl {' '.join(args)}: exit {p.returncode}: {p.stderr}")
        return p.stdout

    def creds(self, role: str, name: str) -> str:
        """Mints credentials with `toolctl creds ROLE NAME`; returns the file."""
        path = os.path.join(self.tmp, f"{role}-{name}.creds")
        self.toolctl("creds", role, name, "--out", path)
        return path

    def approve(self, call_id: str) -> None:
        """`toolctl approvals approve CALL_ID`, through the approver service."""
        self.toolctl("approvals", "approve", call_id, "--approver", self.approver_url, "--comment", "python client test")

    def logs_text(self) -> str:
        out = []
        for log in self.logs:
            try:
                out.append(f"--- {os.path.basename(log)}\n" + pathlib.Path(log).read_text(errors="replace")[-4000:])
            except OSError:
                pass
        return "\n".join(out)

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


class FleetCase(unittest.IsolatedAsyncioTestCase):
    """Tests against one install per class, each with a client connected
    as the agent name AGENT (self.client)."""

    AGENT = "py-agent"
    fleet: Fleet
    creds: str

    @classmethod
    def setUpClass(cls) -> None:
        cls.fleet = Fleet()
        cls.creds = cls.fleet.creds("agent", cls.AGENT)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.fleet.close()

    async def asyncSetUp(self) -> None:
        self.client = await toolgate.Client.connect(self.fleet.url, creds=self.creds)

    async def asyncTearDown(self) -> None:
        await self.client.close()
