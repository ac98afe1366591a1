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

test("the vectors hold both forms of toolgatesig, valid and refused", () => {
  // The single form, and the co-signed one (one signature over a batch's
  // Merkle root, with the event's inclusion path), recognised by its '.'.
  const count = (cosigned, valid) =>
    vectors.vectors.filter((v) => {
      let sig = "";
      try {
        sig = decodeEvent(v.headers, Buffer.from(v.data, "base64")).extensions.toolgatesig ?? "";
      } catch {
        return false; // a malformed vector
      }
      return sig !== "" && sig.includes(".") === cosigned && v.valid === valid;
    }).length;
  assert.ok(count(true, true) >= 3, "valid co-signed vectors");
  assert.ok(count(true, false) >= 10, "refused co-signed vectors");
  assert.ok(count(false, true) >= 4, "valid single form vectors");
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

// Hostile input: every byte of a valid vector's payload and headers
// changed in turn, and random bytes, never crash the reader: it returns
// a result or refuses with a RefusedError, and never accepts a changed
// payload or signature-covered header.
test("mutated vectors are refused, never crash the reader", () => {
  const verifier = new Verifier(vectors.trusted_accounts);
  let seed = 1;
  const rand = (n) => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) % n);
  for (const v of vectors.vectors.filter((x) => x.valid)) {
    const data = Buffer.from(v.data, "base64");
    for (let i = 0; i < data.length; i++) {
      const m = Buffer.from(data);
      m[i] = m[i] ^ (1 + rand(255));
      try {
        const r = verifier.result(v.headers, m, v.agent, v.call_id);
        // Only a change the signature does not cover may pass: none in
        // binary mode, insignificant JSON outside "data" in structured mode.
        assert.notEqual(v.mode, "binary", `accepted a changed payload at byte ${i}`);
        assert.deepEqual(JSON.parse(JSON.stringify(r)), v.result);
      } catch (e) {
        assert.ok(e instanceof RefusedError || e.code === "ERR_ASSERTION", `byte ${i}: ${e.stack}`);
        if (e.code === "ERR_ASSERTION") throw e;
      }
    }
    for (const name of Object.keys(v.headers)) {
      for (let k = 0; k < 20; k++) {
        const h = { ...v.headers };
        const chars = [...h[name]];
        chars[rand(chars.length)] = String.fromCharCode(32 + rand(95));
        h[name] = chars.join("");
        try {
          verifier.result(h, data, v.agent, v.call_id);
        } catch (e) {
          assert.ok(e instanceof RefusedError, `${name}: ${e.stack}`);
        }
      }
    }
  }
  for (let k = 0; k < 500; k++) {
    const junk = Buffer.from(Array.from({ length: rand(300) }, () => rand(256)));
    const h = rand(2) ? {} : { "ce-specversion": "1.0", "ce-id": "x", "ce-source": "y", "ce-type": "z" };
    assert.throws(() => verifier.result(h, junk, "ann", "c1"), RefusedError);
    assert.throws(() => verifier.result({}, Buffer.from(`{"specversion":"1.0","id":"i","source":"s","type":"t","data":${junk.toString("latin1").length}}`), "ann", "c1"), RefusedError);
  }
});
