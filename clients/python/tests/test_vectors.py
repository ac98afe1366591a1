"""The golden vectors of pkg/eventsig: the Python verifier accepts and
refuses them exactly as the Go one does."""

from __future__ import annotations

import base64
import json
import pathlib
import unittest

from toolgate import _events
from toolgate._verify import Refused, Verifier

VECTORS = pathlib.Path(__file__).resolve().parents[3] / "pkg" / "eventsig" / "testdata" / "vectors.json"


class VectorsTest(unittest.TestCase):
    def test_vectors(self) -> None:
        doc = json.loads(VECTORS.read_text())
        self.assertEqual(doc["format"], "toolgate-event-signature-v1")
        v = Verifier(doc["trusted_accounts"])
        valid = refused = 0
        for vec in doc["vectors"]:
            with self.subTest(vec["name"]):
                data = base64.b64decode(vec["data"])
                try:
                    r = v.result(vec["headers"], data, vec["agent"], vec["call_id"])
                except Refused as e:
                    self.assertFalse(vec["valid"], f"refused a valid vector: {e}")
                    self.assertEqual(e.reason, vec["reason"], str(e))
                    refused += 1
                    continue
                self.assertTrue(vec["valid"], f"accepted a vector Go refuses ({vec.get('reason')})")
                self.assertEqual(r, vec["result"])
                ev = _events.decode(vec["headers"], data)
                self.assertEqual(_events.signing_input(ev).decode(), vec["signing_input"])
                valid += 1
        self.assertGreaterEqual(valid, 4)
        self.assertGreaterEqual(refused, 10)

    def test_both_forms_are_in_the_vectors(self) -> None:
        # toolgatesig in its single and its co-signed form (one signature
        # over a batch's Merkle root, with the event's inclusion path).
        doc = json.loads(VECTORS.read_text())
        forms: dict[tuple[bool, bool], int] = {}
        for vec in doc["vectors"]:
            try:
                sig = _events.decode(vec["headers"], base64.b64decode(vec["data"])).extension(_events.EXT_SIGNATURE)
            except _events.MalformedEvent:
                continue
            if sig:
                k = ("." in sig, vec["valid"])
                forms[k] = forms.get(k, 0) + 1
        self.assertGreaterEqual(forms.get((True, True), 0), 3, "valid co-signed vectors")
        self.assertGreaterEqual(forms.get((True, False), 0), 10, "refused co-signed vectors")
        self.assertGreaterEqual(forms.get((False, True), 0), 4, "valid single form vectors")

    def test_trusting_nothing_refuses(self) -> None:
        doc = json.loads(VECTORS.read_text())
        vec = doc["vectors"][0]
        with self.assertRaises(Refused) as cm:
            Verifier([]).result(vec["headers"], base64.b64decode(vec["data"]), vec["agent"], vec["call_id"])
        self.assertEqual(cm.exception.reason, "foreign-issuer")


if __name__ == "__main__":
    unittest.main()
