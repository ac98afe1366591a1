"""A small NATS client core on asyncio: the NATS text protocol
(https://docs.nats.io/reference/reference-protocols/nats-protocol) with
headers, user JWT authentication, request/reply on one inbox
subscription, and reconnection that restores every subscription.

Only what a toolgate agent needs: no TLS, no JetStream API (a JetStream
publish is a request whose reply is the stream's acknowledgement)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
import string
from dataclasses import dataclass, field
from typing import Any, Callable, Coroutine, Optional
from urllib.parse import urlsplit

log = logging.getLogger("toolgate.nats")

CRLF = b"\r\n"
HEADER_LINE = b"NATS/1.0"
_ALPHABET = string.ascii_letters + string.digits
_MAX_CONTROL_LINE = 64 * 1024
_PENDING_LIMIT = 8 * 1024 * 1024


class NATSError(Exception):
    """An error of the NATS connection."""


class AuthError(NATSError):
    """The server refused the credentials."""


class NoResponders(NATSError):
    """Nobody listens on the subject a request was sent to."""


class ConnectionClosed(NATSError):
    """The connection is closed."""


def new_token(n: int = 22) -> str:
    """A random token for inboxes (about 131 bits)."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(n))


@dataclass
class Msg:
    """A message received: its subject, reply subject, headers (first value
    of each), data, and for a status message (no responders, ...) the
    status code."""

    subject: str
    reply: str = ""
    data: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    status: str = ""
    description: str = ""

    def header(self, key: str) -> str:
        """A header's value, its name compared case-insensitively."""
        v = self.headers.get(key)
        if v is not None:
            return v
        lk = key.lower()
        for k, val in self.headers.items():
            if k.lower() == lk:
                return val
        return ""


def encode_headers(headers: dict[str, str]) -> bytes:
    """The header block of HPUB: NATS/1.0, one Key: Value line each, a blank line."""
    out = bytearray(HEADER_LINE + CRLF)
    for k, v in headers.items():
        if not k or any(c in k for c in ":\r\n ") or any(c in v for c in "\r\n"):
            raise ValueError(f"header {k!r} cannot be sent")
        out += k.encode() + b": " + v.encode() + CRLF
    out += CRLF
    return bytes(out)


def decode_headers(block: bytes) -> tuple[dict[str, str], str, str]:
    """The headers, status code and description of an HMSG header block."""
    lines = block.split(CRLF)
    first = lines[0]
    if not first.startswith(HEADER_LINE):
        raise NATSError("message header block does not start with NATS/1.0")
    status = description = ""
    rest = first[len(HEADER_LINE) :].strip()
    if rest:
        code, _, desc = rest.partition(b" ")
        status, description = code.decode(), desc.decode(errors="replace").strip()
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        k, sep, v = line.partition(b":")
        if not sep:
            continue
        key = k.decode(errors="replace").strip()
        headers.setdefault(key, v.decode("utf-8", "replace").strip())
    return headers, status, description


@dataclass
class _Sub:
    sid: int
    subject: str
    cb: Callable[[Msg], None]
    queue: str = ""


class Connection:
    """One NATS connection, reconnecting until closed."""

    def __init__(self) -> None:
        self._servers: list[tuple[str, int]] = []
        self._jwt = ""
        self._sign: Optional[Callable[[bytes], bytes]] = None
        self._name = ""
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None
        self._subs: dict[int, _Sub] = {}
        self._next_sid = 1
        self._pending = bytearray()
        self._flush_scheduled = False
        self._pongs: list[asyncio.Future[None]] = []
        self._read_task: Optional[asyncio.Task[None]] = None
        self._closed = False
        self._connected = asyncio.Event()
        self._info: dict[str, Any] = {}
        self._inbox_prefix = "_INBOX"
        self._resp_prefix = ""
        self._resp_sub: Optional[_Sub] = None
        self._resp_map: dict[str, asyncio.Future[Msg]] = {}
        self.max_reconnect_wait = 2.0
        self.on_reconnect: list[Callable[[], Coroutine[Any, Any, None]]] = []
        self.on_disconnect: list[Callable[[], None]] = []
        self.reconnects = 0
        self.last_error: Optional[str] = None

    # --- connecting -----------------------------------------------------

    async def connect(
        self,
        url: str,
        *,
        jwt: str = "",
        sign: Optional[Callable[[bytes], bytes]] = None,
        inbox_prefix: str = "_INBOX",
        name: str = "toolgate-python",
        timeout: float = 5.0,
    ) -> None:
        """Connects to the first server of url (comma-separated nats:// URLs)
        that accepts the credentials."""
        for u in url.split(","):
            p = urlsplit(u.strip() if "://" in u else "nats://" + u.strip())
            if p.scheme not in ("nats", ""):
                raise NATSError(f"{u}: only nats:// URLs are supported (no TLS)")
            self._servers.append((p.hostname or "127.0.0.1", p.port or 4222))
        self._jwt, self._sign, self._name = jwt, sign, name
        self._inbox_prefix = inbox_prefix
        self._resp_prefix = f"{inbox_prefix}.{new_token()}."
        errors = []
        for host, port in self._servers:
            try:
                await asyncio.wait_for(self._open(host, port), timeout)
                break
            except AuthError:
                raise
            except (OSError, asyncio.TimeoutError, NATSError) as e:
                errors.append(f"{host}:{port}: {e or type(e).__name__}")
        else:
            raise NATSError("cannot connect: " + "; ".join(errors))
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())

    async def _open(self, host: str, port: int) -> None:
        reader, writer = await asyncio.open_connection(host, port, limit=_MAX_CONTROL_LINE * 16)
        try:
            line = await reader.readuntil(CRLF)
            if not line.startswith(b"INFO "):
                raise NATSError(f"expected INFO, got {line[:40]!r}")
            info = json.loads(line[5:])
            if info.get("tls_required"):
                raise NATSError("the server requires TLS, which this client does not speak")
            if not info.get("headers", False):
                raise NATSError("the server does not support headers")
            opts = {
                "verbose": False,
                "pedantic": False,
                "tls_required": False,
                "lang": "python-toolgate",
                "version": "0.1.0",
                "protocol": 1,
                "headers": True,
                "no_responders": True,
                "echo": True,
                "name": self._name,
            }
            if self._jwt:
                nonce = info.get("nonce", "")
                if not nonce or self._sign is None:
                    raise AuthError("the server sent no nonce to sign")
                opts["jwt"] = self._jwt
                opts["sig"] = base64.urlsafe_b64encode(self._sign(nonce.encode())).decode().rstrip("=")
            writer.write(b"CONNECT " + json.dumps(opts, separators=(",", ":")).encode() + CRLF + b"PING" + CRLF)
            await writer.drain()
            while True:
                line = await reader.readuntil(CRLF)
                if line.startswith(b"PONG"):
                    break
                if line.startswith(b"-ERR"):
                    msg = line[4:].strip().strip(b"'").decode(errors="replace")
                    if "authoriz" in msg.lower() or "authentic" in msg.lower() or "expired" in msg.lower():
                        raise AuthError(msg)
                    raise NATSError(msg)
                if line.startswith(b"PING"):
                    writer.write(b"PONG" + CRLF)
        except BaseException:
            writer.close()
            raise
        self._info = info
        self._reader, self._writer = reader, writer
        # Restore every subscription, then what was published meanwhile.
        subs = bytearray()
        for s in self._subs.values():
            subs += f"SUB {s.subject} {s.queue + ' ' if s.queue else ''}{s.sid}".encode() + CRLF
        writer.write(bytes(subs) + bytes(self._pending))
        self._pending.clear()
        self._connected.set()

    @property
    def max_payload(self) -> int:
        """The largest message the server accepts."""
        return int(self._info.get("max_payload", 1024 * 1024))

    @property
    def is_connected(self) -> bool:
        return self._connected.is_set() and not self._closed

    # --- reading ----------------------------------------------------------

    async def _read_loop(self) -> None:
        while not self._closed:
            try:
                await self._read(self._reader)  # type: ignore[arg-type]
            except (OSError, asyncio.IncompleteReadError, NATSError, ValueError) as e:
                self.last_error = str(e) or type(e).__name__
            if self._closed:
                return
            await self._reconnect()

    async def _read(self, r: asyncio.StreamReader) -> None:
        while True:
            line = await r.readuntil(CRLF)
            op = line[:4]
            if op == b"MSG ":
                parts = line[4:-2].split(b" ")
                n = int(parts[-1])
                payload = await r.readexactly(n + 2)
                subj, sid = parts[0].decode(), int(parts[1])
                reply = parts[2].decode() if len(parts) == 4 else ""
                self._deliver(sid, Msg(subject=subj, reply=reply, data=payload[:-2]))
            elif op == b"HMSG":
                parts = line[5:-2].split(b" ")
                hlen, total = int(parts[-2]), int(parts[-1])
                payload = await r.readexactly(total + 2)
                subj, sid = parts[0].decode(), int(parts[1])
                reply = parts[2].decode() if len(parts) == 5 else ""
                headers, status, desc = decode_headers(payload[:hlen])
                self._deliver(sid, Msg(subject=subj, reply=reply, data=payload[hlen:-2], headers=headers, status=status, description=desc))
            elif op == b"PING":
                self._write(b"PONG" + CRLF)
            elif op == b"PONG":
                if self._pongs:
                    f = self._pongs.pop(0)
                    if not f.done():
                        f.set_result(None)
            elif op == b"INFO":
                self._info.update(json.loads(line[5:]))
            elif op == b"-ERR":
                msg = line[4:].strip().strip(b"'").decode(errors="replace")
                self.last_error = msg
                if "permissions violation" in msg.lower():
                    log.warning("nats: %s", msg)
                    continue
                raise NATSError(msg)
            elif op == b"+OK\r":
                continue
            else:
                raise NATSError(f"unexpected protocol line {line[:40]!r}")

    def _deliver(self, sid: int, m: Msg) -> None:
        s = self._subs.get(sid)
        if s is None:
            return
        try:
            s.cb(m)
        except Exception:  # a handler's bug must not stop the connection
            log.exception("nats: message handler of %s failed", s.subject)

    async def _reconnect(self) -> None:
        self._connected.clear()
        if self._writer is not None:
            self._writer.close()
        for f in self._pongs:
            if not f.done():
                f.set_exception(ConnectionClosed("disconnected"))
        self._pongs.clear()
        for cb in self.on_disconnect:
            cb()
        wait = 0.05
        while not self._closed:
            for host, port in self._servers:
                try:
                    await asyncio.wait_for(self._open(host, port), 5)
                except (OSError, asyncio.TimeoutError, NATSError) as e:
                    self.last_error = str(e) or type(e).__name__
                    continue
                self.reconnects += 1
                for rcb in self.on_reconnect:
                    asyncio.get_running_loop().create_task(rcb())
                return
            await asyncio.sleep(wait)
            wait = min(wait * 2, self.max_reconnect_wait)

    # --- writing ----------------------------------------------------------

    def _write(self, b: bytes) -> None:
        if self._closed:
            raise ConnectionClosed("connection closed")
        if not self._connected.is_set():
            if len(self._pending) + len(b) > _PENDING_LIMIT:
                raise NATSError("disconnected, and too much is waiting to be sent")
            self._pending += b
            return
        self._pending += b
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_pending)

    def _flush_pending(self) -> None:
        self._flush_scheduled = False
        if self._pending and self._connected.is_set() and self._writer is not None:
            self._writer.write(bytes(self._pending))
            self._pending.clear()

    def publish(self, subject: str, data: bytes = b"", *, reply: str = "", headers: Optional[dict[str, str]] = None) -> None:
        """Publishes data on subject (with headers: HPUB)."""
        if not subject or any(c in subject for c in " \t\r\n"):
            raise ValueError(f"invalid subject {subject!r}")
        if len(data) > self.max_payload:
            raise NATSError(f"message of {len(data)} bytes exceeds the server's maximum of {self.max_payload}")
        r = f" {reply}" if reply else ""
        if headers:
            hb = encode_headers(headers)
            self._write(f"HPUB {subject}{r} {len(hb)} {len(hb) + len(data)}".encode() + CRLF + hb + data + CRLF)
        else:
            self._write(f"PUB {subject}{r} {len(data)}".encode() + CRLF + data + CRLF)

    def subscribe(self, subject: str, cb: Callable[[Msg], None], queue: str = "") -> int:
        """Subscribes cb to subject; returns the subscription id."""
        sid = self._next_sid
        self._next_sid += 1
        self._subs[sid] = _Sub(sid, subject, cb, queue)
        self._write(f"SUB {subject} {queue + ' ' if queue else ''}{sid}".encode() + CRLF)
        return sid

    def unsubscribe(self, sid: int) -> None:
        """Ends subscription sid."""
        if self._subs.pop(sid, None) is not None and not self._closed:
            self._write(f"UNSUB {sid}".encode() + CRLF)

    async def flush(self, timeout: float = 5.0) -> None:
        """Waits until the server has seen everything sent so far."""
        f: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pongs.append(f)
        self._write(b"PING" + CRLF)
        await asyncio.wait_for(f, timeout)

    def new_inbox(self) -> str:
        """A fresh subject under the connection's inbox prefix."""
        return f"{self._inbox_prefix}.{new_token()}"

    async def request(
        self, subject: str, data: bytes = b"", *, headers: Optional[dict[str, str]] = None, timeout: float = 5.0
    ) -> Msg:
        """Sends a request and waits for the first answer (NoResponders when
        nobody listens)."""
        if self._resp_sub is None:
            sid = self.subscribe(self._resp_prefix + "*", self._on_response)
            self._resp_sub = self._subs[sid]
        token = new_token(12)
        f: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()
        self._resp_map[token] = f
        try:
            self.publish(subject, data, reply=self._resp_prefix + token, headers=headers)
            m = await asyncio.wait_for(f, timeout)
        finally:
            self._resp_map.pop(token, None)
        if m.status == "503":
            raise NoResponders(f"no responders on {subject}")
        return m

    def _on_response(self, m: Msg) -> None:
        f = self._resp_map.get(m.subject[len(self._resp_prefix) :])
        if f is not None and not f.done():
            f.set_result(m)

    async def close(self) -> None:
        """Flushes what is pending and closes the connection."""
        if self._closed:
            return
        try:
            if self.is_connected:
                await self.flush(2)
        except (NATSError, asyncio.TimeoutError):
            pass
        self._closed = True
        self._connected.clear()
        if self._writer is not None:
            self._writer.close()
        if self._read_task is not None:
            self._read_task.cancel()
            try:
                await self._read_task
            except (asyncio.CancelledError, Exception):
                pass
        for f in list(self._resp_map.values()) + self._pongs:
            if not f.done():
                f.set_exception(ConnectionClosed("connection closed"))
