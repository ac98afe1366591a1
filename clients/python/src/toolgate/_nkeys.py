"""NATS nkeys: seeds and public keys (base32 with a prefix byte and a CRC-16).

Only what a toolgate agent needs: decode a user seed into an ed25519
signing key, and decode public keys (U..., A...) into raw ed25519 keys.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

import nacl.signing

PREFIX_SEED = 18 << 3
PREFIX_PRIVATE = 15 << 3
PREFIX_SERVER = 13 << 3
PREFIX_CLUSTER = 2 << 3
PREFIX_OPERATOR = 14 << 3
PREFIX_ACCOUNT = 0
PREFIX_USER = 20 << 3


class NkeyError(ValueError):
    """A key that does not decode: bad base32, bad checksum or wrong kind."""


def _crc16_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xFFFF)
    return table


_CRC_TABLE = _crc16_table()


def crc16(data: bytes) -> int:
    """CRC-16/XMODEM, as nkeys computes it."""
    crc = 0
    for b in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC_TABLE[((crc >> 8) ^ b) & 0xFF]
    return crc


def _b32decode(s: str) -> bytes:
    try:
        return base64.b32decode(s + "=" * (-len(s) % 8))
    except (ValueError, TypeError) as e:
        raise NkeyError(f"not base32: {e}") from None


def _checked(raw: bytes) -> bytes:
    if len(raw) < 3:
        raise NkeyError("too short")
    body, crc = raw[:-2], int.from_bytes(raw[-2:], "little")
    if crc16(body) != crc:
        raise NkeyError("checksum does not match")
    return body


def decode_public(key: str, prefix: int) -> bytes:
    """The raw 32-byte ed25519 public key of an encoded public nkey of kind prefix."""
    if not isinstance(key, str) or not key.isascii():
        raise NkeyError("not a public key")
    body = _checked(_b32decode(key))
    if len(body) != 33 or body[0] != prefix:
        raise NkeyError("not a public key of the expected kind")
    return body[1:]


def encode_public(raw: bytes, prefix: int) -> str:
    """The encoded public nkey of a raw ed25519 key."""
    body = bytes([prefix]) + raw
    return base64.b32encode(body + crc16(body).to_bytes(2, "little")).decode().rstrip("=")


def is_public(key: str, prefix: int) -> bool:
    """Whether key is a valid public nkey of kind prefix."""
    try:
        decode_public(key, prefix)
    except NkeyError:
        return False
    return True


@dataclass(frozen=True)
class KeyPair:
    """A user nkey: signs the server's nonce."""

    signing_key: nacl.signing.SigningKey
    prefix: int

    @property
    def public_key(self) -> str:
        return encode_public(bytes(self.signing_key.verify_key), self.prefix)

    def sign(self, data: bytes) -> bytes:
        return self.signing_key.sign(data).signature


def from_seed(seed: str) -> KeyPair:
    """The key pair of an encoded seed (S...)."""
    body = _checked(_b32decode(seed.strip()))
    if len(body) != 34:
        raise NkeyError("not a seed")
    b0, b1 = body[0], body[1]
    if b0 & 248 != PREFIX_SEED:
        raise NkeyError("not a seed")
    prefix = ((b0 & 7) << 5) | ((b1 & 248) >> 3)
    if prefix not in (PREFIX_USER, PREFIX_ACCOUNT, PREFIX_OPERATOR, PREFIX_SERVER, PREFIX_CLUSTER):
        raise NkeyError("seed of an unknown kind")
    return KeyPair(nacl.signing.SigningKey(body[2:]), prefix)


_DECORATED = re.compile(r"\s*(?:(?:-{3,}.*-{3,}\r?\n)([\w\-.=]+)(?:\r?\n-{3,}.*-{3,}(?:\r?\n|\Z)))")


def parse_creds(text: str) -> tuple[str, KeyPair]:
    """The user JWT and key pair of a .creds file's content."""
    found = _DECORATED.findall(text)
    if len(found) < 2:
        raise NkeyError("not a .creds file: a user JWT and an nkey seed are needed")
    jwt, seed = found[0], found[1]
    kp = from_seed(seed)
    if kp.prefix != PREFIX_USER:
        raise NkeyError("the .creds seed is not a user's")
    return jwt, kp
