"""The asyncio client agents use to call tools through toolgate: it
publishes a call as a CloudEvent on NATS and waits for its signed result,
as the Go client (pkg/client) does."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any, AsyncIterator, Callable, Optional

from . import _events, _nats, _nkeys
from ._lookup import STORED_RESULT_CHECK, LookupSchedule
from ._verify import ROLE_TAG_PREFIX, SERVICES_TAG_PREFIX, Refused, Verifier

log = logging.getLogger("toolgate")

ENV_CREDS = "TOOLGATE_CREDS"
DEFAULT_URL = "nats://127.0.0.1:4222"
_PREFIX = "toolgate"

# How long a call is published again while no worker's intake answers
# (the Go client waits as long).
_NO_WORKER_WAIT = 30.0
# How often a waiting call checks whether a look-up of its stored result
# is due (LookupSchedule says when one is).
_STORED_RESULT_CHECK = STORED_RESULT_CHECK
_API_STATUS_HEADER = "Toolgate-Status"
_SERVICE_ERROR_HEADER = "Nats-Service-Error"


class ToolgateError(Exception):
    """An error of the toolgate client."""


class CredentialsError(ToolgateError):
    """A .creds file that is not an agent's toolgate credentials."""


class NoResult(ToolgateError):
    """No result is stored for the call (or the stored one does not verify)."""


class ListingRefused(ToolgateError):
    """A worker refused a tool listing."""


class _OpenEnum(str, Enum):
    """A str enum that keeps values a newer worker sends."""

    @classmethod
    def _missing_(cls, value: object) -> Any:
        if not isinstance(value, str):
            return None
        obj = str.__new__(cls, value)
        obj._name_ = value.upper() or "NONE"
        obj._value_ = value
        return obj

    def __str__(self) -> str:
        return str(self.value)


class Status(_OpenEnum):
    """How a call ended (or that it waits for people: PENDING)."""

    OK = "ok"
    ERROR = "error"
    DENIED = "denied"
    PENDING = "pending"
    REJECTED = "rejected"
    EXPIRED = "expired"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        """Whether the call is over (every status but PENDING)."""
        return self is not Status.PENDING


class Action(_OpenEnum):
    """The policy's decision on a call; NONE when the result carries none."""

    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"
    NONE = ""


@dataclass(frozen=True)
class Decision:
    """The policy decision a result records."""

    action: Action = Action.NONE
    reason: str = ""
    rule: str = ""
    offending: str = ""
    revision: str = ""
    approvers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Result:
    """A call's result, verified: signed by a worker of the trusted account
    and the result of this very call."""

    call_id: str
    agent: str
    tool: str
    status: Status
    output: str
    is_error: bool = False
    decision: Decision = field(default_factory=Decision)
    duration_ms: int = 0
    error: str = ""
    session_id: str = ""
    parent_call_id: str = ""
    cached: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_data(cls, d: dict[str, Any]) -> "Result":
        dec = d.get("decision") or {}
        return cls(
            call_id=(d.get("call_id") or ""),
            agent=(d.get("agent") or ""),
            tool=(d.get("tool") or ""),
            status=Status((d.get("status") or "")),
            output=(d.get("output") or ""),
            is_error=bool(d.get("is_error")),
            decision=Decision(
                action=Action((dec.get("action") or "")),
                reason=(dec.get("reason") or ""),
                rule=(dec.get("rule") or ""),
                offending=(dec.get("offending") or ""),
                revision=(dec.get("revision") or ""),
                approvers=tuple(dec.get("approvers") or ()),
            ),
            duration_ms=int(d.get("duration_ms") or 0),
            error=(d.get("error") or ""),
            session_id=(d.get("session_id") or ""),
            parent_call_id=(d.get("parent_call_id") or ""),
            cached=bool(d.get("cached")),
            metadata=d.get("metadata") or {},
            raw=d,
        )


@dataclass(frozen=True)
class Progress:
    """A chunk of a running call's output (best effort; the result is
    authoritative)."""

    call_id: str
    tool: str
    stream: str
    seq: int
    chunk: str


@dataclass(frozen=True)
class CancelReply:
    """Where a call was when its cancellation was handled: finished,
    queued, parked, running or unknown."""

    call_id: str
    agent: str
    state: str
    status: str = ""


@dataclass
class Credentials:
    """An agent's credentials: its name, user JWT and nkey, and the account
    whose workers answer it (the toolgate-services tag of its JWT)."""

    name: str
    jwt: str
    key: _nkeys.KeyPair
    services: str
    path: str = ""

    @property
    def inbox_prefix(self) -> str:
        """The only inbox prefix an agent's credentials let it read."""
        return "_INBOX_" + self.name

    @classmethod
    def load(cls, path: Optional[str] = None) -> "Credentials":
        """Reads an agent's .creds file (`toolctl creds agent NAME`); with no
        path, the one $TOOLGATE_CREDS names."""
        path = path or os.environ.get(ENV_CREDS, "")
        if not path:
            raise CredentialsError(f"no credentials: give an agent's .creds file or set {ENV_CREDS}")
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise CredentialsError(f"credentials: {e}") from None
        try:
            c = cls.parse(text)
        except CredentialsError as e:
            raise CredentialsError(f"credentials {path}: {e}") from None
        c.path = path
        return c

    @classmethod
    def parse(cls, text: str) -> "Credentials":
        """Parses a .creds file's content. Errors never quote it."""
        try:
            token, kp = _nkeys.parse_creds(text)
        except _nkeys.NkeyError as e:
            raise CredentialsError(str(e)) from None
        try:
            claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
        except (ValueError, IndexError):
            raise CredentialsError("the user JWT does not decode") from None
        if claims.get("sub") != kp.public_key:
            raise CredentialsError("the nkey seed is not the JWT's user")
        nats = claims.get("nats") or {}
        issuer = nats.get("issuer_account") or claims.get("iss", "")
        services, role = issuer, ""
        for t in nats.get("tags") or []:
            if not isinstance(t, str):
                continue
            if t.startswith(SERVICES_TAG_PREFIX) and _nkeys.is_public(t[len(SERVICES_TAG_PREFIX) :].upper(), _nkeys.PREFIX_ACCOUNT):
                services = t[len(SERVICES_TAG_PREFIX) :].upper()
            if t.lower().startswith(ROLE_TAG_PREFIX):
                role = t[len(ROLE_TAG_PREFIX) :].lower()
        name = claims.get("name", "")
        if role != "agent":
            raise CredentialsError(f"these are {role or 'no toolgate'} credentials of {name!r}, an agent needs agent credentials")
        if not _events.valid_token(name) or not all(c.isascii() and (c.isalnum() or c in "-_") for c in name):
            raise CredentialsError(f"invalid agent name {name!r}")
        return cls(name=name, jwt=token, key=kp, services=services)


def new_call_id() -> str:
    """A fresh call id: 128 random bits in lower-case base32, as the Go
    client makes them."""
    return base64.b32encode(secrets.token_bytes(16)).decode().rstrip("=").lower()


class _Waiter:
    """Whoever waits for one call: its result and, when asked, its progress."""

    def __init__(self, call_id: str, on_pending: Optional[Callable[[Result], None]]) -> None:
        self.call_id = call_id
        self.result: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self.progress: Optional[asyncio.Queue[Optional[Progress]]] = None
        self.on_pending = on_pending
        self.users = 1

    def done(self, r: Result) -> None:
        if not self.result.done():
            self.result.set_result(r)
            if self.progress is not None:
                self.progress.put_nowait(None)


class Call:
    """A call published and not yet collected: its id, its progress as an
    async iterator, its result and its cancellation."""

    def __init__(self, client: "Client", call_id: str, waiter: _Waiter) -> None:
        self.client = client
        self.id = call_id
        self._w = waiter

    async def progress(self) -> AsyncIterator[Progress]:
        """The call's progress chunks, in order, until its result arrives."""
        q = self._w.progress
        if q is None:
            q = self._w.progress = asyncio.Queue()
            if self._w.result.done():
                q.put_nowait(None)
        loop = asyncio.get_running_loop()
        sched = LookupSchedule(loop.time(), self.client._nc.reconnects)
        while True:
            try:
                p = await asyncio.wait_for(q.get(), _STORED_RESULT_CHECK)
            except asyncio.TimeoutError:
                # The live result may have been missed: the stored one ends
                # the progress as well.
                if sched.due(loop.time(), self.client._nc.reconnects):
                    r = await self.client._stored(self.id)
                    if r is not None and r.status.final:
                        self._w.done(r)
                continue
            if p is None:
                return
            yield p

    async def result(self, *, timeout: Optional[float] = None) -> Result:
        """Waits for the final result; with timeout (seconds), raises
        asyncio.TimeoutError after it without cancelling the call. Cancelling
        the awaiting task cancels the call."""
        try:
            return await self.client._wait(self._w, timeout)
        except asyncio.CancelledError:
            if not self._w.result.done():
                self.client._publish_cancel(self.id)
            raise

    async def cancel(self) -> CancelReply:
        """Cancels the call wherever it is (Client.cancel)."""
        return await self.client.cancel(self.id)

    def __await__(self) -> Any:
        return self.result().__await__()


class Client:
    """Calls tools as one agent. Make one with `await Client.connect(url,
    creds=PATH)`; every result is verified against the account that issued
    the agent's credentials and refused when it does not verify."""

    def __init__(self, nc: _nats.Connection, creds: Credentials, verifier: Verifier, mode: str) -> None:
        self._nc = nc
        self._creds = creds
        self.agent = creds.name
        self._verifier = verifier
        self._mode = mode
        self._waiters: dict[str, _Waiter] = {}
        self.refused = 0
        self._result_prefix = f"{_PREFIX}.result.{self.agent}."
        self._progress_prefix = f"{_PREFIX}.progress.{self.agent}."

    @classmethod
    async def connect(
        cls,
        url: Optional[str] = None,
        *,
        creds: Optional[str] = None,
        trusted_accounts: Optional[list[str]] = None,
        mode: str = "binary",
        name: str = "",
    ) -> "Client":
        """Connects as the agent of the .creds file creds ($TOOLGATE_CREDS
        when None) to url ($NATS_URL, else nats://127.0.0.1:4222). Results
        are accepted from the workers of trusted_accounts, by default the
        account the credentials name (toolgate-services tag). mode is the
        CloudEvents content mode of calls: binary or structured."""
        if mode not in ("binary", "structured"):
            raise ValueError(f"mode {mode!r}: want binary or structured")
        c = Credentials.load(creds)
        verifier = Verifier(trusted_accounts if trusted_accounts is not None else [c.services])
        nc = _nats.Connection()
        await nc.connect(
            url or os.environ.get("NATS_URL") or DEFAULT_URL,
            jwt=c.jwt,
            sign=c.key.sign,
            inbox_prefix=c.inbox_prefix,
            name=name or f"toolgate-python:{c.name}",
        )
        client = cls(nc, c, verifier, mode)
        nc.subscribe(client._result_prefix + "*", client._on_result)
        nc.subscribe(client._progress_prefix + "*", client._on_progress)
        nc.on_reconnect.append(client._after_reconnect)
        await nc.flush()
        return client

    async def close(self) -> None:
        """Closes the connection."""
        await self._nc.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @property
    def connection(self) -> _nats.Connection:
        """The NATS connection (reconnects counts reconnections)."""
        return self._nc

    # --- calls -----------------------------------------------------------

    async def call(
        self,
        tool: str,
        args: Any = None,
        *,
        timeout: Optional[float] = None,
        call_id: Optional[str] = None,
        session: str = "",
        judge_only: bool = False,
        on_pending: Optional[Callable[[Result], None]] = None,
        wait_timeout: Optional[float] = None,
    ) -> Result:
        """Runs tool with args (a JSON-able value, a JSON string or bytes) and
        waits for its final result. timeout (seconds) asks for a shorter tool
        timeout than the tool's default; a call parked for people waits
        for them (on_pending hears of it). wait_timeout bounds the wait
        (asyncio.TimeoutError, the call goes on). Cancelling the awaiting
        task cancels the call wherever it is."""
        c = await self.start(tool, args, timeout=timeout, call_id=call_id, session=session, judge_only=judge_only, on_pending=on_pending)
        return await c.result(timeout=wait_timeout)

    async def start(
        self,
        tool: str,
        args: Any = None,
        *,
        timeout: Optional[float] = None,
        call_id: Optional[str] = None,
        session: str = "",
        judge_only: bool = False,
        on_pending: Optional[Callable[[Result], None]] = None,
    ) -> Call:
        """Publishes a call and returns it without waiting: iterate its
        progress(), await its result(). Its result is listened for before
        the call is published, so a fast result is never missed."""
        call_id = call_id or new_call_id()
        if not _events.valid_token(call_id):
            raise ValueError(f"call id {call_id!r} cannot stand as a subject token")
        if not _events.valid_token(tool):
            raise ValueError(f"tool name {tool!r} cannot stand as a subject token")
        w = self._watch(call_id, on_pending)
        try:
            await self._publish(tool, args, call_id, timeout, session, judge_only)
        except BaseException:
            self._unwatch(w)
            raise
        return Call(self, call_id, w)

    async def submit(self, tool: str, args: Any = None, **kw: Any) -> str:
        """Publishes a call and returns its id; collect it later with wait."""
        call_id = kw.pop("call_id", None) or new_call_id()
        if not _events.valid_token(call_id) or not _events.valid_token(tool):
            raise ValueError("call id and tool name must be subject tokens")
        await self._publish(tool, args, call_id, kw.get("timeout"), kw.get("session", ""), kw.get("judge_only", False))
        return call_id

    async def wait(self, call_id: str, *, timeout: Optional[float] = None, on_pending: Optional[Callable[[Result], None]] = None) -> Result:
        """Waits for the final result of a call submitted earlier, including
        one stored while nobody was listening (after a reconnect, or from
        another process)."""
        w = self._watch(call_id, on_pending)
        try:
            try:
                r = await self.result(call_id)
                if r.status.final:
                    w.done(r)
            except (NoResult, _nats.NATSError, asyncio.TimeoutError):
                pass
            return await self._wait(w, timeout)
        finally:
            self._unwatch(w)

    async def progress(self, call_id: str) -> AsyncIterator[Progress]:
        """The progress of a call submitted earlier, from now until its
        result arrives (collect the result with wait)."""
        w = self._watch(call_id, None)
        try:
            async for p in Call(self, call_id, w).progress():
                yield p
        finally:
            self._unwatch(w)

    async def result(self, call_id: str, *, timeout: float = 5.0) -> Result:
        """The latest stored result of a call (possibly pending), verified;
        NoResult when none is stored. A worker answers
        toolgate.api.result.<agent>.<call id>."""
        if not _events.valid_token(call_id):
            raise ValueError(f"call id {call_id!r} cannot stand as a subject token")
        m = await self._ask(f"{_PREFIX}.api.result.{self.agent}.{call_id}", b"", f"get result {call_id}", timeout)
        st = m.header(_API_STATUS_HEADER)
        if st:
            if st.startswith("404"):
                raise NoResult(f"no result stored for call {call_id}")
            raise ToolgateError(f"get result {call_id}: status {st}")
        r = self._verified(m, call_id)
        if r is None:
            raise NoResult(f"the stored result of {call_id} does not verify")
        return r

    async def cancel(self, call_id: str, *, timeout: float = 20.0) -> CancelReply:
        """Cancels the call wherever it is and says where it was: queued,
        parked, running, finished or unknown. The cancelled result follows on
        the call's result subject (wait)."""
        if not _events.valid_token(call_id):
            raise ValueError(f"call id {call_id!r} cannot stand as a subject token")
        m = await self._ask(f"{_PREFIX}.cancel.{self.agent}.{call_id}", b"", f"cancel {call_id}", timeout)
        try:
            d = json.loads(m.data)
        except ValueError as e:
            raise ToolgateError(f"decode the answer to cancel {call_id}: {e}") from None
        if d.get("error"):
            raise ToolgateError(f"cancel {call_id}: {d['error']}")
        return CancelReply(call_id=d.get("call_id", call_id), agent=d.get("agent", self.agent), state=d.get("state", ""), status=d.get("status", ""))

    async def tools(self, *, timeout: float = 5.0) -> list[dict[str, Any]]:
        """The tools this agent may call: the registry listing without the
        tools its policy denies outright (name, description, parameters)."""
        body = json.dumps({"agent": self.agent}).encode()
        m = await self._ask(f"{_PREFIX}.api.tools.{self.agent}", body, "list tools", timeout)
        if m.header(_SERVICE_ERROR_HEADER):
            raise ListingRefused(m.header(_SERVICE_ERROR_HEADER))
        try:
            out = json.loads(m.data)
        except ValueError as e:
            raise ToolgateError(f"decode tool listing: {e}") from None
        if not isinstance(out, list):
            raise ToolgateError("decode tool listing: not a list")
        return out

    # --- inside ------------------------------------------------------------

    async def _ask(self, subject: str, body: bytes, what: str, timeout: float) -> _nats.Msg:
        """A request a worker answers; what names it in errors."""
        try:
            return await self._nc.request(subject, body, timeout=timeout)
        except _nats.NoResponders as e:
            raise ToolgateError(f"{what} (is a worker running?): {e}") from None

    def _watch(self, call_id: str, on_pending: Optional[Callable[[Result], None]]) -> _Waiter:
        w = self._waiters.get(call_id)
        if w is not None and not w.result.done():
            w.users += 1
            if on_pending is not None:
                w.on_pending = on_pending
            return w
        w = _Waiter(call_id, on_pending)
        self._waiters[call_id] = w
        return w

    def _unwatch(self, w: _Waiter) -> None:
        w.users -= 1
        if w.users <= 0 and self._waiters.get(w.call_id) is w:
            del self._waiters[w.call_id]

    async def _wait(self, w: _Waiter, timeout: Optional[float]) -> Result:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        lookup: Optional[asyncio.Task[Optional[Result]]] = None
        sched = LookupSchedule(loop.time(), self._nc.reconnects)
        try:
            while not w.result.done():
                step = _STORED_RESULT_CHECK
                if deadline is not None:
                    step = min(step, deadline - loop.time())
                    if step <= 0:
                        raise asyncio.TimeoutError(f"waiting for the result of {w.call_id}")
                waits: set[asyncio.Future[Any]] = {w.result}
                if lookup is not None:
                    waits.add(lookup)
                done, _ = await asyncio.wait(waits, timeout=step, return_when=asyncio.FIRST_COMPLETED)
                if lookup is not None and lookup in done:
                    r = lookup.result()
                    lookup = None
                    if r is not None and r.status.final:
                        w.done(r)
                    continue
                if not done and lookup is None and sched.due(loop.time(), self._nc.reconnects):
                    # A live message can be missed (a reconnect during a
                    # long call); the stored result cannot: look now and
                    # then (LookupSchedule says when). The connection
                    # hands every message to its handler as it is read:
                    # none is dropped for a slow consumer.
                    lookup = loop.create_task(self._stored(w.call_id))
            return w.result.result()
        finally:
            if lookup is not None:
                lookup.cancel()
            if w.result.done():
                self._unwatch_done(w)

    def _unwatch_done(self, w: _Waiter) -> None:
        if self._waiters.get(w.call_id) is w:
            del self._waiters[w.call_id]

    async def _stored(self, call_id: str) -> Optional[Result]:
        try:
            return await self.result(call_id, timeout=_STORED_RESULT_CHECK)
        except (ToolgateError, _nats.NATSError, asyncio.TimeoutError):
            return None

    async def _after_reconnect(self) -> None:
        """Looks up the stored results of the calls waited for: those that
        ended while the connection was down."""
        for call_id, w in list(self._waiters.items()):
            r = await self._stored(call_id)
            if r is not None and r.status.final:
                w.done(r)

    def _verified(self, m: _nats.Msg, call_id: str) -> Optional[Result]:
        try:
            d = self._verifier.result(m.headers, m.data, self.agent, call_id)
        except Refused as e:
            # Not this call's result, unsigned or forged (inside the agents
            # account another agent can make an answer land here). The
            # real one is still to come.
            self.refused += 1
            log.warning("result refused: agent=%s call_id=%s: %s", self.agent, call_id, e)
            return None
        return Result.from_data(d)

    def _on_result(self, m: _nats.Msg) -> None:
        call_id = m.subject[len(self._result_prefix) :]
        w = self._waiters.get(call_id)
        if w is None or w.result.done():
            return
        r = self._verified(m, call_id)
        if r is None:
            return
        if r.status.final:
            w.done(r)
        elif w.on_pending is not None:
            try:
                w.on_pending(r)
            except Exception:
                log.exception("on_pending of %s failed", call_id)

    def _on_progress(self, m: _nats.Msg) -> None:
        call_id = m.subject[len(self._progress_prefix) :]
        w = self._waiters.get(call_id)
        if w is None or w.progress is None or w.result.done():
            return
        try:
            ev = _events.decode(m.headers, m.data)
            d = json.loads(ev.data)
        except (_events.MalformedEvent, ValueError):
            return
        if ev.type != _events.TYPE_CALL_PROGRESS or not isinstance(d, dict) or d.get("call_id") != call_id:
            return
        w.progress.put_nowait(
            Progress(call_id=call_id, tool=str(d.get("tool", "")), stream=str(d.get("stream", "")), seq=int(d.get("seq") or 0), chunk=str(d.get("chunk", "")))
        )

    async def _publish(self, tool: str, args: Any, call_id: str, timeout: Optional[float], session: str, judge_only: bool) -> None:
        data: dict[str, Any] = {"arguments": _arguments(args)}
        if session:
            data["session_id"] = session
        if timeout:
            data["timeout_ms"] = int(timeout * 1000)
        if judge_only:
            data["judge_only"] = True
        subject = f"{_PREFIX}.call.{self.agent}.{tool}"
        body, headers = _encode_call(call_id, self.agent, data, self._mode)
        # The workers' intake stores an agent's calls: while none answers
        # (an election, every worker restarting) the call is published
        # again under its id (stored once) for up to _NO_WORKER_WAIT.
        loop = asyncio.get_running_loop()
        give_up = loop.time() + _NO_WORKER_WAIT
        while True:
            try:
                m = await self._nc.request(subject, body, headers=headers, timeout=5.0)
                break
            except _nats.NoResponders:
                if loop.time() >= give_up:
                    raise ToolgateError(f"publish call {call_id}: no stream takes calls (is a worker running?)") from None
                await asyncio.sleep(0.25)
        try:
            ack = json.loads(m.data)
        except ValueError:
            raise ToolgateError(f"publish call {call_id}: no acknowledgement") from None
        if ack.get("error"):
            raise ToolgateError(f"publish call {call_id}: {ack['error'].get('description', ack['error'])}")

    def _publish_cancel(self, call_id: str) -> None:
        """Fire and forget: the workers stop the call; its cancelled result
        is stored as every result is."""
        try:
            self._nc.publish(f"{_PREFIX}.cancel.{self.agent}.{call_id}", b"")
        except _nats.NATSError:
            pass


def _arguments(args: Any) -> Any:
    if args is None:
        return {}
    if isinstance(args, (bytes, bytearray)):
        args = args.decode()
    if isinstance(args, str):
        return json.loads(args)
    return args


def _encode_call(call_id: str, agent: str, data: dict[str, Any], mode: str) -> tuple[bytes, dict[str, str]]:
    now = datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    source = "agent://" + agent
    if mode == "structured":
        ev = {
            "specversion": _events.SPEC_VERSION,
            "id": call_id,
            "source": source,
            "type": _events.TYPE_CALL_REQUESTED,
            "time": now,
            "datacontenttype": _events.CONTENT_TYPE_JSON,
            "data": data,
        }
        return json.dumps(ev, separators=(",", ":"), ensure_ascii=False).encode(), {
            "content-type": _events.CONTENT_TYPE_CE,
            _events.HEADER_MSG_ID: call_id,
        }
    return body, {
        "ce-specversion": _events.SPEC_VERSION,
        "ce-id": _events.escape(call_id),
        "ce-source": _events.escape(source),
        "ce-type": _events.TYPE_CALL_REQUESTED,
        "ce-time": now,
        "content-type": _events.CONTENT_TYPE_JSON,
        _events.HEADER_MSG_ID: call_id,
    }
