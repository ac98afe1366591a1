"""Verification of the results a worker signs, as pkg/eventsig specifies it
(go doc github.com/toolgate/toolgate/pkg/eventsig): the signature, the
signer's user JWT (a worker of a trusted account), and that the result is
the one of the call waited for. The reasons a result is refused carry the
names the golden vectors use."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import nacl.bindings
import nacl.exceptions
import nacl.signing

from . import _events, _nkeys

WORKER_SOURCE = "toolgate://worker/"
ROLE_TAG_PREFIX = "toolgate-role:"
SERVICES_TAG_PREFIX = "toolgate-services:"
_KNOWN_ROLES = ("worker", "approver", "admin", "agent")
_MAX_SIGNERS = 1024
_MAX_JWT = 1024 * 1024


class Refused(Exception):
    """A message refused as a result: reason is the vectors' name for why
    (malformed, unsigned, bad-jwt, foreign-issuer, expired, wrong-role,
    bad-signature, wrong-type, wrong-source, wrong-call, wrong-agent)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"event refused: {reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _b64url(s: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    except (ValueError, TypeError):
        raise ValueError("not base64url") from None


# The co-signed form of toolgatesig, <sig>.<index>.<size>.<salt>.<path>:
# one signature over the Merkle tree root of several events' signing
# inputs, and this event's inclusion proof (pkg/eventsig).
BATCH_PREFIX = b"23:toolgate-event-batch-v1\n"
MAX_BATCH = 65536
_B64URL_CHARS = re.compile(r"[A-Za-z0-9_-]*")
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,5}")


def _b64url_strict(s: str) -> bytes:
    """Canonical unpadded base64url: only the alphabet, and re-encoding the
    bytes gives s back (no stray bits in the last character)."""
    if not _B64URL_CHARS.fullmatch(s) or len(s) % 4 == 1:
        raise ValueError("not unpadded base64url")
    raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode() != s:
        raise ValueError("not canonical base64url")
    return raw


def cosigned_message(value: str, signing_input: bytes) -> tuple[bytes, bytes]:
    """The ed25519 signature of a co-signed toolgatesig value and the batch
    signing message it must verify over: "23:toolgate-event-batch-v1\\n",
    the size and "\\n", then the hex of the Merkle root that the event's
    leaf (SHA-256 of 0x00, salt, signing input) and its inclusion path give
    (RFC 9162 §2.1.3.2, nodes SHA-256 of 0x01, left, right). The size
    signed binds the index too: an event has one valid co-signed value.
    ValueError when the value is not exactly the specified form."""
    parts = value.split(".")
    if len(parts) != 5:
        raise ValueError(f"{len(parts)} parts, want 5")
    sig_s, index_s, size_s, salt_s, path_s = parts
    if not _DECIMAL.fullmatch(index_s) or not _DECIMAL.fullmatch(size_s):
        raise ValueError("index or size is not a decimal without leading zero")
    index, size = int(index_s), int(size_s)
    if not 2 <= size <= MAX_BATCH or index >= size:
        raise ValueError(f"index {index} of size {size} is out of range")
    sig, salt, path = _b64url_strict(sig_s), _b64url_strict(salt_s), _b64url_strict(path_s)
    if len(sig) != 64 or len(salt) != 16 or len(path) % 32 != 0:
        raise ValueError("signature, salt or path of the wrong length")
    r = hashlib.sha256(b"\x00" + salt + signing_input).digest()
    fn, sn = index, size - 1
    for i in range(0, len(path), 32):
        if sn == 0:
            raise ValueError("the path is longer than the tree is deep")
        p = path[i : i + 32]
        if fn & 1 or fn == sn:
            r = hashlib.sha256(b"\x01" + p + r).digest()
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = hashlib.sha256(b"\x01" + r + p).digest()
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ValueError("the path is shorter than the tree is deep")
    return sig, BATCH_PREFIX + size_s.encode() + b"\n" + r.hex().encode()


@dataclass(frozen=True)
class _Signer:
    name: str
    key: bytes  # raw ed25519 public key
    expires: int


def decode_user_jwt(token: str) -> dict[str, Any]:
    """The claims of a NATS user JWT (version 2) whose signature by its
    issuer account verifies; ValueError otherwise. Trust is not checked."""
    if len(token) > _MAX_JWT:
        raise ValueError("JWT too large")
    parts = token.split(".")
    if len(parts) != 3:
        raise ValueError("expected 3 chunks")
    header = json.loads(_b64url(parts[0]))
    if not isinstance(header, dict) or str(header.get("typ", "")).upper() != "JWT" or header.get("alg") not in ("ed25519-nkey",):
        raise ValueError("not a NATS JWT header")
    claims = json.loads(_b64url(parts[1]))
    if not isinstance(claims, dict) or "type" in claims:
        raise ValueError("not a version 2 JWT")
    nats = claims.get("nats")
    if not isinstance(nats, dict) or nats.get("type") != "user" or nats.get("version") != 2:
        raise ValueError("not a version 2 user JWT")
    iss = claims.get("iss")
    try:
        issuer = _nkeys.decode_public(iss, _nkeys.PREFIX_ACCOUNT)  # type: ignore[arg-type]
        sig = _b64url(parts[2])
        nacl.signing.VerifyKey(issuer).verify((parts[0] + "." + parts[1]).encode(), sig)
    except (_nkeys.NkeyError, ValueError, nacl.exceptions.BadSignatureError, TypeError) as e:
        raise ValueError(f"claim failed signature verification: {e}") from None
    return claims


class Verifier:
    """Verifies result messages against trusted account keys (A...). A
    Verifier that trusts nothing refuses every result. It keeps the signer
    JWTs it checked, so a JWT is decoded once until it expires."""

    def __init__(self, trusted_accounts: Iterable[str]) -> None:
        self._accounts = set()
        for i, a in enumerate(trusted_accounts):
            a = a.strip()
            if not _nkeys.is_public(a, _nkeys.PREFIX_ACCOUNT):
                raise ValueError(f"trusted account {i} ({a!r}) is not an nkey account public key (A...)")
            self._accounts.add(a)
        self._signers: dict[str, _Signer] = {}
        self._lock = threading.Lock()

    @property
    def accounts(self) -> list[str]:
        return sorted(self._accounts)

    def _signer(self, token: str) -> _Signer:
        now = int(time.time())
        with self._lock:
            s = self._signers.get(token)
        if s is not None and (s.expires == 0 or now < s.expires):
            return s
        try:
            claims = decode_user_jwt(token)
        except ValueError as e:
            raise Refused("bad-jwt", str(e)) from None
        iss = claims.get("iss", "")
        nats = claims["nats"]
        issuer_account = nats.get("issuer_account") or ""
        if iss not in self._accounts or (issuer_account and issuer_account != iss):
            raise Refused("foreign-issuer", f"JWT issued by {iss}, an account not trusted here")
        exp, nbf = _int(claims.get("exp")), _int(claims.get("nbf"))
        if (exp > 0 and now >= exp) or (nbf > 0 and now < nbf):
            raise Refused("expired", f"JWT of {claims.get('name')!r} expired or not yet valid")
        tags = nats.get("tags") or []
        roles = [t.lower()[len(ROLE_TAG_PREFIX) :] for t in tags if isinstance(t, str) and t.lower().startswith(ROLE_TAG_PREFIX)]
        if len(roles) != 1 or roles[0] not in _KNOWN_ROLES:
            raise Refused("wrong-role", f"JWT of {claims.get('name')!r} names roles {roles}")
        name = claims.get("name")
        if not isinstance(name, str) or not name.strip():
            raise Refused("bad-jwt", "JWT names no identity")
        if roles[0] != "worker":
            raise Refused("wrong-role", f"{roles[0]}:{name} may not sign results (needs worker)")
        try:
            key = _nkeys.decode_public(claims.get("sub", ""), _nkeys.PREFIX_USER)
        except (_nkeys.NkeyError, TypeError) as e:
            raise Refused("bad-jwt", f"public key: {e}") from None
        s = _Signer(name=name, key=key, expires=exp)
        with self._lock:
            if len(self._signers) >= _MAX_SIGNERS:
                self._signers.clear()
            self._signers[token] = s
        return s

    def verify(self, ev: _events.Event) -> str:
        """Checks ev's signature; returns the name of the worker that made it."""
        sig, token = ev.extension(_events.EXT_SIGNATURE), ev.extension(_events.EXT_SIGNER)
        if not sig or not token:
            raise Refused("unsigned", f"{ev.id} is not signed")
        s = self._signer(token)
        try:
            if "." in sig:
                raw, msg = cosigned_message(sig, _events.signing_input(ev))
            else:  # canonical unpadded base64url, as Go reads it
                raw, msg = _b64url_strict(sig), _events.signing_input(ev)
            if len(raw) != 64:
                raise ValueError("not an ed25519 signature")
            nacl.bindings.crypto_sign_open(raw + msg, s.key)
        except (ValueError, nacl.exceptions.BadSignatureError, TypeError):
            raise Refused("bad-signature", f"{ev.id}: bad signature") from None
        return s.name

    def result(self, headers: Mapping[str, str] | None, data: bytes, agent: str, call_id: str) -> dict[str, Any]:
        """The result data a message carries for call call_id of agent, when
        it verifies; Refused otherwise."""
        try:
            ev = _events.decode(headers, data)
            r = json.loads(ev.data)
        except (_events.MalformedEvent, ValueError) as e:
            raise Refused("malformed", str(e)) from None
        bad = _result_shape(r)
        if bad:
            raise Refused("malformed", f"result data is not a result: {bad}")
        self.verify(ev)
        if ev.type != _events.TYPE_CALL_COMPLETED:
            raise Refused("wrong-type", f"{ev.id} is a {ev.type}, not a result")
        if not ev.source.startswith(WORKER_SOURCE):
            raise Refused("wrong-source", f"{ev.id} comes from {ev.source}")
        if ev.subject != call_id or r.get("call_id", "") != call_id or not ev.id.startswith(_events.agent_key(agent, call_id) + ":"):
            raise Refused("wrong-call", f"{ev.id} is the result of call {r.get('call_id')!r}, not {call_id!r}")
        if r.get("agent", "") != agent:
            raise Refused("wrong-agent", f"{ev.id} is a result for agent {r.get('agent')!r}, not {agent!r}")
        out: dict[str, Any] = r
        return out


# The members of pkg/events.ResultData and the JSON types Go's decoder
# takes for them (null takes any: it leaves the zero value).
_RESULT_MEMBERS: dict[str, tuple[type, ...]] = {
    "call_id": (str,),
    "agent": (str,),
    "tool": (str,),
    "session_id": (str,),
    "status": (str,),
    "output": (str,),
    "is_error": (bool,),
    "metadata": (dict,),
    "decision": (dict,),
    "duration_ms": (int,),
    "error": (str,),
    "parent_call_id": (str,),
    "cached": (bool,),
    "hooks": (list,),
}
_DECISION_MEMBERS: dict[str, tuple[type, ...]] = {
    "action": (str,),
    "reason": (str,),
    "rule": (str,),
    "offending": (str,),
    "revision": (str,),
    "approvers": (list,),
}


def _shape(d: Any, members: dict[str, tuple[type, ...]]) -> str:
    if not isinstance(d, dict):
        return "not an object"
    for k, v in d.items():
        types = members.get(k)
        if types is None or v is None:
            continue
        if not isinstance(v, types) or (bool not in types and isinstance(v, bool)):
            return f"{k} is not a {types[0].__name__}"
    return ""


def _result_shape(r: Any) -> str:
    """What in r Go's decoder would not take into a ResultData; "" when
    nothing."""
    bad = _shape(r, _RESULT_MEMBERS)
    if bad or r.get("decision") is None:
        return bad
    bad = _shape(r["decision"], _DECISION_MEMBERS)
    if not bad and any(not isinstance(a, str) for a in r["decision"].get("approvers") or []):
        bad = "approvers are not strings"
    return bad and "decision: " + bad


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0
