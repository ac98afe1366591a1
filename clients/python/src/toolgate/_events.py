"""CloudEvents as toolgate carries them on NATS (pkg/events): decoding in
the three content modes, with the data bytes exactly as the signature
covers them, and the binary-mode call message an agent publishes."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

SPEC_VERSION = "1.0"
CONTENT_TYPE_CE = "application/cloudevents+json"
CONTENT_TYPE_JSON = "application/json"
HEADER_MSG_ID = "Nats-Msg-Id"

TYPE_CALL_REQUESTED = "dev.toolgate.call.requested.v1"
TYPE_CALL_COMPLETED = "dev.toolgate.call.completed.v1"
TYPE_CALL_PROGRESS = "dev.toolgate.call.progress.v1"

EXT_SIGNATURE = "toolgatesig"
EXT_SIGNER = "toolgatesigner"


class MalformedEvent(ValueError):
    """The message is not a CloudEvent toolgate reads."""


@dataclass
class Event:
    """A decoded event: its attributes (strings, as pkg/events reads them)
    and its data bytes (what the signature covers)."""

    id: str
    source: str
    type: str
    subject: str = ""
    datacontenttype: str = ""
    extensions: dict[str, Any] = field(default_factory=dict)
    data: bytes = b""

    def extension(self, name: str) -> str:
        """A string extension attribute; "" when absent or not a string."""
        v = self.extensions.get(name)
        return v if isinstance(v, str) else ""


_ATTRS = frozenset(("id", "source", "type", "subject", "dataschema", "time"))
_EXT_NAME = re.compile(r"^[a-z0-9]{1,20}$")
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_HEX = b"0123456789abcdefABCDEF"


def unescape(s: str) -> str:
    """Percent-decodes a header value as Go's url.PathUnescape does; a value
    with a bad escape is taken as written."""
    if "%" not in s:
        return s
    b = s.encode("utf-8", "surrogateescape")
    out = bytearray()
    i = 0
    while i < len(b):
        c = b[i]
        if c == 0x25:  # '%'
            h = b[i + 1 : i + 3]
            if len(h) != 2 or h[0] not in _HEX or h[1] not in _HEX:
                return s
            out.append(int(h, 16))
            i += 3
            continue
        out.append(c)
        i += 1
    return out.decode("utf-8", "surrogateescape")


def escape(s: str) -> str:
    """Percent-encodes what may not stand raw in a header value."""
    b = s.encode("utf-8")
    if all(0x20 < c < 0x7F and c not in (0x25, 0x22) for c in b):
        return s
    return "".join(chr(c) if 0x20 < c < 0x7F and c not in (0x25, 0x22) else f"%{c:02X}" for c in b)


def _header(headers: Mapping[str, str], key: str) -> str:
    v = headers.get(key)
    if v:
        return v
    lk = key.lower()
    for k, val in headers.items():
        if val and k.lower() == lk:
            return val
    return ""


def decode(headers: Mapping[str, str] | None, data: bytes) -> Event:
    """Decodes a CloudEvent from a NATS message in any content mode."""
    headers = headers or {}
    sv = _header(headers, "ce-specversion")
    if sv:
        return _decode_binary(headers, data, sv)
    ct = _header(headers, "content-type")
    if ct and not ct.lower().startswith(CONTENT_TYPE_CE):
        raise MalformedEvent(f"no ce-specversion header and content-type is {ct}")
    return _decode_structured(data)


def _decode_binary(headers: Mapping[str, str], data: bytes, sv: str) -> Event:
    if sv != SPEC_VERSION:
        raise MalformedEvent(f"ce-specversion is {sv!r}, want {SPEC_VERSION!r}")
    attrs: dict[str, str] = {}
    ext: dict[str, Any] = {}
    for k, v in headers.items():
        lk = k.lower()
        if lk[:3] != "ce-":
            continue
        name = lk[3:]
        if name == "specversion" or name in attrs or name in ext:
            continue
        val = unescape(v) if "%" in v else v
        if name in _ATTRS:
            if name == "time" and not _RFC3339.match(val):
                raise MalformedEvent("ce-time is not RFC 3339: " + val)
            attrs[name] = val
        elif _EXT_NAME.match(name):
            ext[name] = val
    ev = Event(
        id=attrs.get("id", ""),
        source=attrs.get("source", ""),
        type=attrs.get("type", ""),
        subject=attrs.get("subject", ""),
        datacontenttype=_header(headers, "content-type"),
        extensions=ext,
        data=bytes(data),
    )
    _check_required(ev)
    return ev


def _decode_structured(payload: bytes) -> Event:
    text = payload.strip()
    if not text or text[:1] != b"{":
        what = "a payload that is not a JSON object" if text else "an empty payload"
        raise MalformedEvent("no ce-specversion header and " + what)
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise MalformedEvent(f"invalid JSON: {e}") from None
    if not isinstance(obj, dict) or "specversion" not in obj:
        raise MalformedEvent("structured event without specversion")
    if obj["specversion"] != SPEC_VERSION:
        raise MalformedEvent(f"specversion is {obj['specversion']!r}, want {SPEC_VERSION!r}")
    attrs: dict[str, str] = {}
    ext: dict[str, Any] = {}
    for k, v in obj.items():
        if k in ("specversion", "data", "data_base64"):
            continue
        if k in ("id", "source", "type", "subject", "dataschema", "time", "datacontenttype"):
            if not isinstance(v, str):
                raise MalformedEvent(f"attribute {k} is not a string")
            attrs[k] = v
        else:
            ext[k] = v
    ct = attrs.get("datacontenttype", "")
    data = b""
    if "data_base64" in obj:
        import base64

        try:
            data = base64.b64decode(obj["data_base64"], validate=True)
        except (ValueError, TypeError):
            raise MalformedEvent("data_base64 is not base64") from None
    elif "data" in obj:
        if ct == "" or _is_json(ct):
            data = member_span(text, b"data")
        elif isinstance(obj["data"], str):
            data = obj["data"].encode("utf-8")
        else:
            raise MalformedEvent("data of a non-JSON content type is not a string")
    ev = Event(
        id=attrs.get("id", ""),
        source=attrs.get("source", ""),
        type=attrs.get("type", ""),
        subject=attrs.get("subject", ""),
        datacontenttype=ct,
        extensions=ext,
        data=data,
    )
    _check_required(ev)
    return ev


def _is_json(ct: str) -> bool:
    media = ct.split(";", 1)[0].strip().lower()
    return media in ("application/json", "text/json") or media.endswith("+json")


def _check_required(ev: Event) -> None:
    if not ev.id:
        raise MalformedEvent("the event has no id (ce-id)")
    if not ev.source:
        raise MalformedEvent("missing required attribute: source")
    if not ev.type:
        raise MalformedEvent("missing required attribute: type")


_DECODER = json.JSONDecoder()
_WS_RE = re.compile(r"[ \t\n\r]*")
_WS_CHARS = frozenset(" \t\n\r")


def _ws(s: str, i: int) -> int:
    if s[i : i + 1] not in _WS_CHARS:
        return i  # compact JSON, as workers write it: no regex needed
    m = _WS_RE.match(s, i)
    return m.end() if m else i


def member_span(text: bytes, name: bytes) -> bytes:
    """The bytes of the last top-level member name's value in the JSON object
    text, from just after its ':' (whitespace included) to the value's end:
    what the CloudEvents SDK reads as a structured event's data."""
    try:
        s = text.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedEvent("the event is not UTF-8") from None
    want = name.decode()
    i = _ws(s, 0)
    if s[i : i + 1] != "{":
        raise MalformedEvent("not a JSON object")
    i += 1
    found = None
    try:
        while True:
            i = _ws(s, i)
            if s[i : i + 1] == "}":
                break
            key, i = _DECODER.raw_decode(s, i)
            i = _ws(s, i)
            if s[i : i + 1] != ":":
                raise MalformedEvent("invalid JSON object")
            start = i + 1
            _, end = _DECODER.raw_decode(s, _ws(s, start))
            if key == want:
                found = s[start:end]
            i = _ws(s, end)
            if s[i : i + 1] == ",":
                i += 1
                continue
            if s[i : i + 1] == "}":
                break
            raise MalformedEvent("invalid JSON object")
    except ValueError as e:
        raise MalformedEvent(f"invalid JSON: {e}") from None
    if found is None:
        raise MalformedEvent("no data member")
    return found.encode("utf-8")


def signing_input(ev: Event) -> bytes:
    """pkg/events.SigningInput of a decoded event."""
    out = bytearray()
    for s in ("toolgate-event-signature-v1", ev.type, ev.source, ev.id, ev.subject):
        b = s.encode("utf-8", "surrogateescape")
        out += str(len(b)).encode() + b":" + b + b"\n"
    out += hashlib.sha256(ev.data).hexdigest().encode()
    return bytes(out)


_SAFE_KEY = re.compile(r"[A-Za-z0-9_=-]{1,200}")


def agent_key(agent: str, call_id: str) -> str:
    """pkg/events.AgentKey: how an event id names its call."""
    if _SAFE_KEY.fullmatch(call_id):
        return agent + "." + call_id
    return agent + ".h" + hashlib.sha256(call_id.encode()).digest()[:16].hex()


def valid_token(s: str) -> bool:
    """Whether s can stand as one subject token (pkg/events.ValidToken)."""
    return bool(s) and len(s.encode()) <= 128 and not any(c in ".*>" or ord(c) <= 0x20 or ord(c) == 0x7F for c in s)
