// The golden vectors of the signature format (pkg/eventsig/testdata/
// vectors.json): the client accepts exactly the vectors marked valid,
// with the result data and signing input they name, and refuses the
// others for the reason named, as the Go reader does.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Verifier, RefusedError, decodeEvent, signingInput } from "../dist/index.js";

const file = fileURLToPath(new URL("../../../pkg/eventsig/testdata/vectors.json", import.meta.url));
const vectors = JSON.parse(readFileSync(file, "utf8"));

test("the vectors name valid and refused results of every kind", () => {
  assert.equal(vectors.format, "toolgate-event-signature-v1");
  const reasons = new Set(vectors.vectors.filter((v) => !v.valid).map((v) => v.reason));
  for (const r of ["bad-signature", "unsigned", "foreign-issuer", "wrong-role", "expired", "wrong-call", "wrong-agent", "wrong-type", "wrong-source"]) {
    assert.ok(reasons.has(r), `no vector refused as ${r}`);
  }
  assert.ok(vectors.vectors.some((v) => v.valid));
});

for (const v of vectors.vectors) {
  test(`vector: ${v.name}`, () => {
    const verifier = new Verifier(vectors.trusted_accounts);
    const data = Buffer.from(v.data, "base64");
    let got;
    let err;
    try {
      got = verifier.result(v.headers, data, v.agent, v.call_id);
    } catch (e) {
      err = e;
    }
    if (v.valid) {
      assert.equal(err, undefined, `refused a valid vector: ${err?.message}`);
      assert.deepEqual(JSON.parse(JSON.stringify(got)), v.result);
      const ev = decodeEvent(v.headers, data);
      assert.equal(signingInput(ev.type, ev.source, ev.id, ev.subject, ev.data).toString("utf8"), v.signing_input);
    } else {
      assert.ok(err instanceof RefusedError, `accepted a vector the reader must refuse (${v.reason}): ${JSON.stringify(got)}`);
      assert.equal(err.reason, v.reason, err.message);
    }
  });
}

test("a verifier that trusts no account refuses every vector", () => {
  const verifier = new Verifier([]);
  for (const v of vectors.vectors) {
    assert.throws(() => verifier.result(v.headers, Buffer.from(v.data, "base64"), v.agent, v.call_id), RefusedError, v.name);
  }
});
