"""A small blocking wrapper around the asyncio Client, for scripts and
frameworks that call tools synchronously. It runs the client's event loop
in a thread of its own."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Coroutine, Optional, TypeVar

from .client import CancelReply, Client, Result

T = TypeVar("T")


class SyncClient:
    """Client's calls, blocking: SyncClient.connect(url, creds=PATH)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, thread: threading.Thread, client: Client) -> None:
        self._loop, self._thread, self._client = loop, thread, client

    @classmethod
    def connect(cls, url: Optional[str] = None, **kw: Any) -> "SyncClient":
        """Connects as Client.connect does, with the same arguments."""
        loop = asyncio.new_event_loop()
        t = threading.Thread(target=loop.run_forever, name="toolgate-loop", daemon=True)
        t.start()
        try:
            client = asyncio.run_coroutine_threadsafe(Client.connect(url, **kw), loop).result()
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            t.join()
            raise
        return cls(loop, t, client)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @property
    def agent(self) -> str:
        return self._client.agent

    @property
    def client(self) -> Client:
        """The asyncio client underneath (use it only from its loop)."""
        return self._client

    def call(self, tool: str, args: Any = None, **kw: Any) -> Result:
        """Client.call, blocking."""
        return self._run(self._client.call(tool, args, **kw))

    def submit(self, tool: str, args: Any = None, **kw: Any) -> str:
        """Client.submit, blocking."""
        return self._run(self._client.submit(tool, args, **kw))

    def wait(self, call_id: str, **kw: Any) -> Result:
        """Client.wait, blocking."""
        return self._run(self._client.wait(call_id, **kw))

    def result(self, call_id: str, **kw: Any) -> Result:
        """Client.result, blocking."""
        return self._run(self._client.result(call_id, **kw))

    def cancel(self, call_id: str, **kw: Any) -> CancelReply:
        """Client.cancel, blocking."""
        return self._run(self._client.cancel(call_id, **kw))

    def tools(self) -> list[dict[str, Any]]:
        """Client.tools, blocking."""
        return self._run(self._client.tools())

    def close(self) -> None:
        """Closes the client and stops its loop."""
        try:
            self._run(self._client.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()

    def __enter__(self) -> "SyncClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
