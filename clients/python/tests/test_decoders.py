"""The decoders on hostile input: whatever arrives on a result subject,
the verifier refuses it (Refused) or accepts a real result, and never fails
otherwise; the NATS header block and nkeys decode as their Go
counterparts write them."""

from __future__ import annotations

import base64
import json
import pathlib
import random
import unittest

from toolgate import _events, _nats, _nkeys
from toolgate._verify import Refused, Verifier

VECTORS = pathlib.Path(__file__).resolve().parents[3] / "pkg" / "eventsig" / "testdata" / "vectors.json"


class HostileInputTest(unittest.TestCase):
    def test_mutated_vectors_are_refused_never_crash(self) -> None:
        doc = json.loads(VECTORS.read_text())
        v = Verifier(doc["trusted_accounts"])
        rnd = random.Random(35)
        accepted = 0
        for vec in doc["vectors"]:
            data = base64.b64decode(vec["data"])
            for _ in range(300):
                d, h = bytearray(data), dict(vec["headers"])
                what = rnd.randrange(5)
                if what == 0 and d:
                    d[rnd.randrange(len(d))] = rnd.randrange(256)
                elif what == 1 and d:
                    del d[rnd.randrange(len(d)) :]
                elif what == 2 and h:
                    k = rnd.choice(sorted(h))
                    h[k] = h[k][: rnd.randrange(len(h[k]) + 1)] + rnd.choice(["%", "%zz", "\u00e9", "", "x"])
                elif what == 3 and h:
                    del h[rnd.choice(sorted(h))]
                else:
                    d = bytearray(rnd.randbytes(rnd.randrange(64)))
                try:
                    r = v.result(h, bytes(d), vec["agent"], vec["call_id"])
                except Refused as e:
                    self.assertTrue(e.reason)
                    continue
                # Accepted: only a change the signature does not cover
                # (the time, the dedup id, the content-type header).
                self.assertTrue(vec["valid"], f"{vec['name']}: accepted a mutation of a refused vector")
                self.assertEqual(r, vec["result"])
                accepted += 1
        self.assertGreater(accepted, 0)

    def test_structured_data_bytes(self) -> None:
        # Whitespace after the colon is part of the data, as the CloudEvents
        # SDK reads it; the last of two data members counts.
        ev = _events.decode({}, b'{"specversion":"1.0","id":"x","source":"s","type":"t","data": {"a" : 1} ,"datacontenttype":"application/json"}')
        self.assertEqual(ev.data, b' {"a" : 1}')
        ev = _events.decode({}, b'{"specversion":"1.0","id":"x","source":"s","type":"t","data":{"a":1},"data":{"b":2}}')
        self.assertEqual(ev.data, b'{"b":2}')
        ev = _events.decode({}, b'{"specversion":"1.0","id":"x","source":"s","type":"t","data_base64":"aGk="}')
        self.assertEqual(ev.data, b"hi")
        ev = _events.decode({}, b'{"specversion":"1.0","id":"x","source":"s","type":"t","toolgatesig":5}')
        self.assertEqual(ev.extension("toolgatesig"), "")
        for bad in (b"", b"[]", b'{"id":"x"}', b'{"specversion":"0.3","id":"x","source":"s","type":"t"}', b'{"specversion":"1.0","source":"s","type":"t"}'):
            with self.assertRaises(_events.MalformedEvent):
                _events.decode({}, bad)

    def test_unescape_as_go(self) -> None:
        self.assertEqual(_events.unescape("a%20b%C3%A9"), "a b\u00e9")
        self.assertEqual(_events.unescape("100%"), "100%")
        self.assertEqual(_events.unescape("a%2"), "a%2")
        self.assertEqual(_events.unescape("a+b"), "a+b")
        self.assertEqual(_events.escape("host name \u00e9%"), "host%20name%20%C3%A9%25")

    def test_agent_key_as_go(self) -> None:
        self.assertEqual(_events.agent_key("ann", "c1"), "ann.c1")
        # events.AgentKey("ann", "a.b"): the hash of an id that is not a safe key token.
        self.assertEqual(_events.agent_key("ann", "a.b"), "ann.h" + __import__("hashlib").sha256(b"a.b").digest()[:16].hex())


class FramingTest(unittest.TestCase):
    def test_header_block(self) -> None:
        b = _nats.encode_headers({"ce-id": "x", "Nats-Msg-Id": "y"})
        self.assertEqual(b, b"NATS/1.0\r\nce-id: x\r\nNats-Msg-Id: y\r\n\r\n")
        h, status, desc = _nats.decode_headers(b[:-2])
        self.assertEqual((h, status), ({"ce-id": "x", "Nats-Msg-Id": "y"}, ""))
        h, status, desc = _nats.decode_headers(b"NATS/1.0 503\r\n\r\n")
        self.assertEqual((h, status), ({}, "503"))
        h, status, desc = _nats.decode_headers(b"NATS/1.0 404 No Messages\r\nToolgate-Status: 404 none\r\n\r\n")
        self.assertEqual((status, desc, h["Toolgate-Status"]), ("404", "No Messages", "404 none"))
        with self.assertRaises(ValueError):
            _nats.encode_headers({"bad\r\nkey": "v"})
        with self.assertRaises(ValueError):
            _nats.encode_headers({"k": "v\r\nPUB evil 1"})

    def test_nkeys(self) -> None:
        doc = json.loads(VECTORS.read_text())
        acct = doc["trusted_accounts"][0]
        raw = _nkeys.decode_public(acct, _nkeys.PREFIX_ACCOUNT)
        self.assertEqual(_nkeys.encode_public(raw, _nkeys.PREFIX_ACCOUNT), acct)
        self.assertFalse(_nkeys.is_public(acct, _nkeys.PREFIX_USER))
        broken = acct[:-1] + ("A" if acct[-1] != "A" else "B")
        self.assertFalse(_nkeys.is_public(broken, _nkeys.PREFIX_ACCOUNT))
        with self.assertRaises(_nkeys.NkeyError):
            _nkeys.from_seed("SUnotaseed")
        with self.assertRaises(_nkeys.NkeyError):
            _nkeys.parse_creds("no creds here")


if __name__ == "__main__":
    unittest.main()
