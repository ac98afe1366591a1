"""The co-signed form of toolgatesig (pkg/eventsig): one ed25519 signature
over the Merkle root of several events' signing inputs, each event carrying
its inclusion proof. Events are co-signed here with the vectors' worker key
(its seed is the one pkg/eventsig's vectors derive), the tree and the paths
built by RFC 6962's recursive definition, independently of the verifier's
iterative check: every index of every size verifies, and every change of
the value, the data or the batch that changes what is signed is refused as
"bad-signature"."""

from __future__ import annotations

import base64
import hashlib
import json
import pathlib
import random
import unittest
from typing import Any

import nacl.signing

from toolgate import _events, _nkeys
from toolgate._verify import MAX_BATCH, Refused, Verifier, cosigned_message

VECTORS = pathlib.Path(__file__).resolve().parents[3] / "pkg" / "eventsig" / "testdata" / "vectors.json"


def b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def leaf(salt: bytes, data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + salt + data).digest()


def node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def batch_message(size: int, root: bytes) -> bytes:
    """What the one signature of a batch covers."""
    return b"23:toolgate-event-batch-v1\n%d\n" % size + root.hex().encode()


def split(n: int) -> int:
    """The largest power of two smaller than n."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(leaves: list[bytes]) -> bytes:
    """RFC 6962's Merkle Tree Hash of leaf hashes."""
    if len(leaves) == 1:
        return leaves[0]
    k = split(len(leaves))
    return node(mth(leaves[:k]), mth(leaves[k:]))


def path(m: int, leaves: list[bytes]) -> list[bytes]:
    """RFC 6962's PATH(m, D[n]): leaf to root."""
    if len(leaves) == 1:
        return []
    k = split(len(leaves))
    if m < k:
        return path(m, leaves[:k]) + [mth(leaves[k:])]
    return path(m - k, leaves[k:]) + [mth(leaves[:k])]


class Batch:
    """A batch signed as a worker signs one: inputs, salts, one signature."""

    def __init__(self, key: nacl.signing.SigningKey, inputs: list[bytes], rnd: random.Random) -> None:
        self.salts = [rnd.randbytes(16) for _ in inputs]
        self.leaves = [leaf(s, d) for s, d in zip(self.salts, inputs)]
        root = mth(self.leaves)
        self.sig = key.sign(batch_message(len(inputs), root)).signature

    def value(self, i: int, **change: Any) -> str:
        """Event i's toolgatesig, with parts replaced by change."""
        p = {
            "sig": b64(self.sig),
            "index": str(i),
            "size": str(len(self.leaves)),
            "salt": b64(self.salts[i]),
            "path": b64(b"".join(path(i, self.leaves))),
        }
        p.update(change)
        return ".".join((p["sig"], p["index"], p["size"], p["salt"], p["path"]))


class CosignedTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.doc = json.loads(VECTORS.read_text())
        cls.vec = next(v for v in cls.doc["vectors"] if v["name"] == "result, binary mode")
        cls.data = base64.b64decode(cls.vec["data"])
        cls.input = _events.signing_input(_events.decode(cls.vec["headers"], cls.data))
        # The vectors' worker w1: its seed is pkg/eventsig's vectorKey.
        account = cls.doc["trusted_accounts"][0]
        seed = hashlib.sha256(f"toolgate signature vectors: w1@{account}".encode()).digest()
        cls.key = nacl.signing.SigningKey(seed)
        jwt = cls.vec["headers"]["ce-toolgatesigner"]
        claims = json.loads(base64.urlsafe_b64decode(jwt.split(".")[1] + "=="))
        assert _nkeys.encode_public(bytes(cls.key.verify_key), _nkeys.PREFIX_USER) == claims["sub"], "the vectors' worker key changed"
        cls.verifier = Verifier(cls.doc["trusted_accounts"])

    def batch(self, size: int, at: int, seed: int = 1) -> Batch:
        """A batch of size events, the vector's result at index at, the
        others audit-like signing inputs."""
        inputs = [b"27:toolgate-event-signature-v1\n25:dev.toolgate.audit.call.v1\n" + str(i).encode() for i in range(size)]
        inputs[at] = self.input
        return Batch(self.key, inputs, random.Random(seed * 1000 + size))

    def result(self, value: str, data: bytes | None = None) -> dict[str, Any]:
        h = dict(self.vec["headers"], **{"ce-toolgatesig": value})
        return self.verifier.result(h, self.data if data is None else data, self.vec["agent"], self.vec["call_id"])

    def refused(self, value: str, data: bytes | None = None) -> None:
        with self.assertRaises(Refused, msg=value) as cm:
            self.result(value, data)
        self.assertEqual(cm.exception.reason, "bad-signature", f"{value}: {cm.exception}")

    def test_every_index_of_every_size_verifies(self) -> None:
        for size in range(2, 10):
            for i in range(size):
                with self.subTest(size=size, index=i):
                    self.assertEqual(self.result(self.batch(size, i).value(i)), self.vec["result"])

    def test_large_batches_verify(self) -> None:
        for size, i in ((16, 15), (17, 16), (33, 31), (100, 64), (100, 99)):
            with self.subTest(size=size, index=i):
                self.assertEqual(self.result(self.batch(size, i).value(i)), self.vec["result"])

    def test_the_largest_batch(self) -> None:
        # A tree of MAX_BATCH leaves is too many hashes to build here: the
        # last leaf's path, whose siblings are full subtrees, any hashes.
        salt = bytes(range(16))
        r = leaf(salt, self.input)
        sibs = []
        for d in range(16):
            s = hashlib.sha256(b"subtree %d" % d).digest()
            sibs.append(s)
            r = node(s, r)
        sig = b64(self.key.sign(batch_message(MAX_BATCH, r)).signature)
        p = b64(b"".join(sibs))
        self.assertEqual(self.result(f"{sig}.{MAX_BATCH - 1}.{MAX_BATCH}.{b64(salt)}.{p}"), self.vec["result"])
        self.refused(f"{sig}.{MAX_BATCH - 1}.{MAX_BATCH + 1}.{b64(salt)}.{p}")

    def test_structured_mode(self) -> None:
        vec = next(v for v in self.doc["vectors"] if v["name"] == "result, structured mode")
        data = base64.b64decode(vec["data"])
        sig = json.loads(data)["toolgatesig"]
        inp = _events.signing_input(_events.decode(vec["headers"], data))
        b = Batch(self.key, [b"audit", inp, b"audit 2"], random.Random(3))
        ok = data.replace(sig.encode(), b.value(1).encode())
        self.assertEqual(self.verifier.result(vec["headers"], ok, vec["agent"], vec["call_id"]), vec["result"])
        bad = data.replace(sig.encode(), b.value(1, index="2").encode())
        with self.assertRaises(Refused) as cm:
            self.verifier.result(vec["headers"], bad, vec["agent"], vec["call_id"])
        self.assertEqual(cm.exception.reason, "bad-signature")

    def test_tampering_is_refused(self) -> None:
        for size, i in ((2, 0), (2, 1), (3, 2), (5, 4), (6, 4), (7, 6), (9, 8)):
            b = self.batch(size, i)
            p = path(i, b.leaves)
            with self.subTest(size=size, index=i):
                self.result(b.value(i))  # the untouched value verifies
                for j in range(len(p)):  # each hash of the path changed
                    q = list(p)
                    q[j] = bytes([q[j][0] ^ 1]) + q[j][1:]
                    self.refused(b.value(i, path=b64(b"".join(q))))
                for other in range(size + 2):  # another index
                    if other != i:
                        self.refused(b.value(i, index=str(other)))
                for other in (*range(0, 20), 65536, 65537, 10**6):  # another size
                    if other != size:
                        self.refused(b.value(i, size=str(other)))
                salt = bytearray(b.salts[i])
                salt[0] ^= 1
                self.refused(b.value(i, salt=b64(bytes(salt))))
                self.refused(b.value(i, salt=b64(b.salts[(i + 1) % size])))
                self.refused(b.value(i, salt=b64(b.salts[i] + b"\x00")))  # 17 bytes
                self.refused(b.value(i, salt=b64(b.salts[i][:15])))  # 15 bytes
                self.refused(b.value(i, path=b64(b"".join(p[:-1]))))  # one hash short
                self.refused(b.value(i, path=b64(b"".join(p) + p[-1])))  # one hash long
                self.refused(b.value(i, path=b64(b"".join(p) + b"\x00" * 32)))
                self.refused(b.value(i, path=b64(b"".join(p)[:-1])))  # not a multiple of 32
                self.refused(b.value(i, path=""))
                sig = bytearray(b.sig)
                sig[10] ^= 1
                self.refused(b.value(i, sig=b64(bytes(sig))))
                data = bytearray(self.data)  # the data changed under a valid proof
                data[20] ^= 1
                self.refused(b.value(i), bytes(data))
                self.refused(self.batch(size, i, seed=2).value(i, sig=b64(b.sig)))  # another batch's salts

    def test_strict_syntax_is_refused(self) -> None:
        b = self.batch(5, 4)
        good = {
            "sig": b64(b.sig),
            "salt": b64(b.salts[4]),
            "path": b64(b"".join(path(4, b.leaves))),
        }
        bad: list[dict[str, str]] = [
            {"index": "04"},
            {"index": "+4"},
            {"index": "-4"},
            {"index": " 4"},
            {"index": "4 "},
            {"index": "4\n"},
            {"index": "\u0664"},  # ARABIC-INDIC DIGIT FOUR: int() would take it
            {"index": "4.0"},
            {"index": ""},
            {"index": "0x4"},
            {"size": "05"},
            {"size": "5_0"},
            {"size": "\uff15"},  # FULLWIDTH DIGIT FIVE
            {"size": ""},
            {"size": "1"},
            {"index": "0", "size": "1"},
            {"index": "5"},
            {"size": "65537"},
            {"size": "0" * 7 + "5"},
        ]
        for part, text in good.items():
            bad += [
                {part: text + "="},
                {part: text + "=="},
                {part: text.replace("-", "+").replace("_", "/") if ("-" in text or "_" in text) else "+" + text[1:]},
                {part: text[:-1] + "!"},
                {part: text + "A"},
                {part: text[:-1]},
                {part: ""},
            ]
            # The last character's unused bits set: same bytes, not canonical.
            if (len(text) * 6) % 8:
                alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                c = alphabet.index(text[-1])
                bad.append({part: text[:-1] + alphabet[c ^ 1]})
        for change in bad:
            with self.subTest(change=change):
                self.refused(b.value(4, **change))

    def test_the_parser_is_strict_before_any_hash(self) -> None:
        # What the signature check alone would also refuse (a changed leaf
        # or root) the parser refuses first, as the form says.
        b = self.batch(6, 5)
        p = path(5, b.leaves)
        sig, msg = cosigned_message(b.value(5), self.input)
        self.assertEqual((sig, msg), (b.sig, b"23:toolgate-event-batch-v1\n6\n" + mth(b.leaves).hex().encode()))
        for value, why in (
            (b.value(5, path=b64(b"".join(p) + p[0])), "longer"),
            (b.value(5, path=b64(b"".join(p[:-1]))), "shorter"),
            (b.value(5, salt=b64(b.salts[5] + b"\x00")), "wrong length"),
            (b.value(5, sig=b64(b.sig + b"\x00")), "wrong length"),
            (b.value(5, path=b64(b"".join(p) + b"\x00")), "wrong length"),
            (b.value(5, index="6"), "out of range"),
            (b.value(5, index="05"), "leading zero"),
            (b.value(5) + ".", "6 parts"),
        ):
            with self.subTest(value=value):
                with self.assertRaisesRegex(ValueError, why):
                    cosigned_message(value, self.input)

    def test_wrong_shape_is_refused(self) -> None:
        b = self.batch(3, 2)
        v = b.value(2)
        parts = v.split(".")
        for value in (
            ".".join(parts[:4]),
            v + ".",
            v + "." + parts[4],
            "." + v,
            v.replace(".", ".."),
            parts[0] + ".",
            ".".join(parts[:1] + parts[2:]),
            ".".join([parts[0], parts[2], parts[1], parts[3], parts[4]]),
            "....",
        ):
            with self.subTest(value=value):
                self.refused(value)

    def test_the_size_is_signed(self) -> None:
        # Index 1 walks the same path in batches of 5 to 8: the root is the
        # same, the signed size tells them apart, so only 5 verifies.
        b = self.batch(5, 1)
        self.result(b.value(1))
        for size in (6, 7, 8):
            self.refused(b.value(1, size=str(size)))
        self.refused(b.value(1, size="4"))  # one hash fewer needed: too long
        self.refused(b.value(1, size="9"))  # one hash more needed: too short
        # The root signed without its size (the message before the size
        # was signed) is no batch signature.
        unsized = self.key.sign(b"23:toolgate-event-batch-v1\n" + mth(b.leaves).hex().encode()).signature
        self.refused(b.value(1, sig=b64(unsized)))

    def test_the_forms_do_not_mix(self) -> None:
        b = self.batch(2, 1)
        single = b64(self.key.sign(self.input).signature)
        self.result(single)  # the single form, same key, still verifies
        self.refused(b.value(1, sig=single))  # a single form signature in a co-signed value
        self.refused(b.value(1).split(".")[0])  # the batch signature alone
        # The event signed alone, as a batch of one: the leaf is no root.
        r = leaf(b.salts[1], self.input)
        one = self.key.sign(batch_message(1, r)).signature
        self.refused(b.value(1, sig=b64(one), size="1", index="0", path=""))

    def test_the_single_form_is_unpadded_base64url(self) -> None:
        single = b64(self.key.sign(self.input).signature)
        self.result(single)
        for bad in (single + "=", single + "==", single[:40] + " " + single[40:], single[:40] + "!" + single[40:]):
            with self.subTest(value=bad):
                self.refused(bad)

    def test_any_change_of_the_value_is_refused(self) -> None:
        rnd = random.Random(34)
        chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ 0\u0660"
        for size in (2, 3, 5, 8):
            b = self.batch(size, size - 1)
            v = b.value(size - 1)
            self.result(v)
            for _ in range(300):
                s = list(v)
                at = rnd.randrange(len(s))
                what = rnd.randrange(3)
                if what == 0:
                    s[at] = rnd.choice(chars.replace(s[at], ""))
                elif what == 1:
                    s.insert(at, rnd.choice(chars))
                else:
                    del s[at]
                self.refused("".join(s))

if __name__ == "__main__":
    unittest.main()
