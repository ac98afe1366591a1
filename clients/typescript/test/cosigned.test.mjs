// The co-signed form of toolgatesig (pkg/eventsig): one ed25519 signature
// over the Merkle root of several events' signing inputs, each event
// carrying its inclusion proof. Events are co-signed here with the
// vectors' worker key (its seed is the one pkg/eventsig's vectors derive),
// the tree and the paths built by RFC 6962's recursive definition,
// independently of the verifier's iterative check: every index of every
// size verifies, and every change of the value, the data or the batch
// that changes what is signed is refused as "bad-signature".
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { createHash, createPrivateKey, sign } from "node:crypto";
import { fromPublic } from "@nats-io/nkeys";
import { Verifier, RefusedError, decodeEvent, signingInput, cosignedMessage, MAX_BATCH } from "../dist/index.js";

const file = fileURLToPath(new URL("../../../pkg/eventsig/testdata/vectors.json", import.meta.url));
const doc = JSON.parse(readFileSync(file, "utf8"));
const vec = doc.vectors.find((v) => v.name === "result, binary mode");
const data = Buffer.from(vec.data, "base64");
const ev = decodeEvent(vec.headers, data);
const input = signingInput(ev.type, ev.source, ev.id, ev.subject, ev.data);
const verifier = new Verifier(doc.trusted_accounts);

// The vectors' worker w1: its seed is pkg/eventsig's vectorKey.
const seed = createHash("sha256").update(`toolgate signature vectors: w1@${doc.trusted_accounts[0]}`).digest();
const key = createPrivateKey({ key: Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), seed]), format: "der", type: "pkcs8" });
const ed = (msg) => sign(null, msg, key);
const sub = JSON.parse(Buffer.from(vec.headers["ce-toolgatesigner"].split(".")[1], "base64url")).sub;
assert.ok(fromPublic(sub).verify(Buffer.from("probe"), ed(Buffer.from("probe"))), "the vectors' worker key changed");

const b64 = (b) => Buffer.from(b).toString("base64url");
const sha = (...parts) => parts.reduce((h, p) => h.update(p), createHash("sha256")).digest();
const leaf = (salt, d) => sha(Buffer.of(0), salt, d);
const node = (l, r) => sha(Buffer.of(1), l, r);
const batchMessage = (size, root) => Buffer.from(`23:toolgate-event-batch-v1\n${size}\n${root.toString("hex")}`);

/** split is the largest power of two smaller than n. */
function split(n) {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}
/** mth is RFC 6962's Merkle Tree Hash of leaf hashes. */
function mth(leaves) {
  if (leaves.length === 1) return leaves[0];
  const k = split(leaves.length);
  return node(mth(leaves.slice(0, k)), mth(leaves.slice(k)));
}
/** path is RFC 6962's PATH(m, D[n]), leaf to root. */
function path(m, leaves) {
  if (leaves.length === 1) return [];
  const k = split(leaves.length);
  return m < k ? [...path(m, leaves.slice(0, k)), mth(leaves.slice(k))] : [...path(m - k, leaves.slice(k)), mth(leaves.slice(0, k))];
}

let seedRand = 34;
const rand = (n) => ((seedRand = (seedRand * 1103515245 + 12345) & 0x7fffffff) % n);
const randomBytes16 = () => Buffer.from(Array.from({ length: 16 }, () => rand(256)));

/** batch signs size events as a worker does, the vector's result at index at. */
function batch(size, at) {
  const inputs = Array.from({ length: size }, (_, i) => Buffer.from(`27:toolgate-event-signature-v1\n25:dev.toolgate.audit.call.v1\n${i}`));
  inputs[at] = input;
  const salts = inputs.map(() => randomBytes16());
  const leaves = inputs.map((d, i) => leaf(salts[i], d));
  const sig = ed(batchMessage(size, mth(leaves)));
  return {
    salts,
    leaves,
    sig,
    value(i, change = {}) {
      const p = { sig: b64(sig), index: String(i), size: String(size), salt: b64(salts[i]), path: b64(Buffer.concat(path(i, leaves))), ...change };
      return [p.sig, p.index, p.size, p.salt, p.path].join(".");
    },
  };
}

function result(value, d = data) {
  return verifier.result({ ...vec.headers, "ce-toolgatesig": value }, d, vec.agent, vec.call_id);
}
function refused(value, d = data) {
  assert.throws(() => result(value, d), (e) => e instanceof RefusedError && e.reason === "bad-signature", value);
}
const verifies = (value) => assert.deepEqual(JSON.parse(JSON.stringify(result(value))), vec.result);

test("every index of every size verifies", () => {
  for (let size = 2; size <= 9; size++) {
    for (let i = 0; i < size; i++) verifies(batch(size, i).value(i));
  }
  for (const [size, i] of [[16, 15], [17, 16], [33, 31], [100, 64], [100, 99]]) verifies(batch(size, i).value(i));
});

test("the largest batch", () => {
  // A tree of MAX_BATCH leaves is too many hashes to build here: the last
  // leaf's path, whose siblings are full subtrees, any hashes.
  const salt = Buffer.from(Array.from({ length: 16 }, (_, i) => i));
  let r = leaf(salt, input);
  const sibs = [];
  for (let d = 0; d < 16; d++) {
    sibs.push(sha(Buffer.from(`subtree ${d}`)));
    r = node(sibs[d], r);
  }
  const sig = b64(ed(batchMessage(MAX_BATCH, r)));
  verifies(`${sig}.${MAX_BATCH - 1}.${MAX_BATCH}.${b64(salt)}.${b64(Buffer.concat(sibs))}`);
  refused(`${sig}.${MAX_BATCH - 1}.${MAX_BATCH + 1}.${b64(salt)}.${b64(Buffer.concat(sibs))}`);
});

test("structured mode", () => {
  const sv = doc.vectors.find((v) => v.name === "result, structured mode");
  const sdata = Buffer.from(sv.data, "base64");
  const sev = decodeEvent(sv.headers, sdata);
  const b = batch(3, 1);
  // The batch signed over this event's input instead of the binary one's.
  const sinput = signingInput(sev.type, sev.source, sev.id, sev.subject, sev.data);
  const leaves = [b.leaves[0], leaf(b.salts[1], sinput), b.leaves[2]];
  const sig = b64(ed(batchMessage(3, mth(leaves))));
  const value = [sig, "1", "3", b64(b.salts[1]), b64(Buffer.concat(path(1, leaves)))].join(".");
  const old = JSON.parse(sdata).toolgatesig;
  const ok = Buffer.from(sdata.toString("utf8").replace(old, value));
  assert.deepEqual(JSON.parse(JSON.stringify(verifier.result(sv.headers, ok, sv.agent, sv.call_id))), sv.result);
  const bad = Buffer.from(sdata.toString("utf8").replace(old, value.replace(".1.3.", ".2.3.")));
  assert.throws(() => verifier.result(sv.headers, bad, sv.agent, sv.call_id), (e) => e.reason === "bad-signature");
});

test("tampering is refused", () => {
  for (const [size, i] of [[2, 0], [2, 1], [3, 2], [5, 4], [6, 4], [7, 6], [9, 8]]) {
    const b = batch(size, i);
    const p = path(i, b.leaves);
    verifies(b.value(i));
    for (let j = 0; j < p.length; j++) {
      const q = p.map((h) => Buffer.from(h));
      q[j][0] ^= 1;
      refused(b.value(i, { path: b64(Buffer.concat(q)) }));
    }
    for (let other = 0; other < size + 2; other++) if (other !== i) refused(b.value(i, { index: String(other) }));
    for (const other of [...Array.from({ length: 20 }, (_, k) => k), 65536, 65537, 1e6]) if (other !== size) refused(b.value(i, { size: String(other) }));
    const salt = Buffer.from(b.salts[i]);
    salt[0] ^= 1;
    refused(b.value(i, { salt: b64(salt) }));
    refused(b.value(i, { salt: b64(b.salts[(i + 1) % size]) }));
    refused(b.value(i, { salt: b64(Buffer.concat([b.salts[i], Buffer.of(0)])) }));
    refused(b.value(i, { salt: b64(b.salts[i].subarray(0, 15)) }));
    refused(b.value(i, { path: b64(Buffer.concat(p.slice(0, -1))) })); // one hash short
    refused(b.value(i, { path: b64(Buffer.concat([...p, p[p.length - 1]])) })); // one hash long
    refused(b.value(i, { path: b64(Buffer.concat([...p, Buffer.alloc(32)])) }));
    refused(b.value(i, { path: b64(Buffer.concat(p).subarray(0, -1)) })); // not a multiple of 32
    refused(b.value(i, { path: "" }));
    const sig = Buffer.from(b.sig);
    sig[10] ^= 1;
    refused(b.value(i, { sig: b64(sig) }));
    const d = Buffer.from(data); // the data changed under a valid proof
    d[20] ^= 1;
    refused(b.value(i), d);
    refused(batch(size, i).value(i, { sig: b64(b.sig) })); // another batch's salts
  }
});

test("strict syntax: decimals, canonical base64url", () => {
  const b = batch(5, 4);
  const good = { sig: b64(b.sig), salt: b64(b.salts[4]), path: b64(Buffer.concat(path(4, b.leaves))) };
  const bad = [
    { index: "04" }, { index: "+4" }, { index: "-4" }, { index: " 4" }, { index: "4 " }, { index: "4\n" },
    { index: "\u0664" }, { index: "4.0" }, { index: "" }, { index: "0x4" }, { index: "4e0" },
    { size: "05" }, { size: "5_0" }, { size: "\uff15" }, { size: "" }, { size: "1" }, { index: "0", size: "1" },
    { index: "5" }, { size: "65537" }, { size: "00000005" },
  ];
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  for (const [part, text] of Object.entries(good)) {
    bad.push(
      { [part]: text + "=" },
      { [part]: text + "==" },
      { [part]: /[-_]/.test(text) ? text.replace(/-/g, "+").replace(/_/g, "/") : "+" + text.slice(1) },
      { [part]: text.slice(0, -1) + "!" },
      { [part]: text + "A" },
      { [part]: text.slice(0, -1) },
      { [part]: "" },
    );
    // The last character's unused bits set: the same bytes, not canonical.
    if ((text.length * 6) % 8) {
      bad.push({ [part]: text.slice(0, -1) + alphabet[alphabet.indexOf(text.at(-1)) ^ 1] });
    }
  }
  for (const change of bad) refused(b.value(4, change));
});

test("the parser is strict before any hash", () => {
  // What the signature check alone would also refuse (a changed leaf or
  // root) the parser refuses first, as the form says.
  const b = batch(6, 5);
  const p = path(5, b.leaves);
  const got = cosignedMessage(b.value(5), input);
  assert.deepEqual(got.sig, b.sig);
  assert.equal(got.message.toString("utf8"), `23:toolgate-event-batch-v1\n6\n${mth(b.leaves).toString("hex")}`);
  for (const [value, why] of [
    [b.value(5, { path: b64(Buffer.concat([...p, p[0]])) }), /longer/],
    [b.value(5, { path: b64(Buffer.concat(p.slice(0, -1))) }), /shorter/],
    [b.value(5, { salt: b64(Buffer.concat([b.salts[5], Buffer.of(0)])) }), /wrong length/],
    [b.value(5, { sig: b64(Buffer.concat([b.sig, Buffer.of(0)])) }), /wrong length/],
    [b.value(5, { path: b64(Buffer.concat([...p, Buffer.of(0)])) }), /wrong length/],
    [b.value(5, { index: "6" }), /out of range/],
    [b.value(5, { index: "05" }), /leading zero/],
    [b.value(5) + ".", /6 parts/],
  ]) {
    assert.throws(() => cosignedMessage(value, input), why, value);
  }
});

test("a value of the wrong shape is refused", () => {
  const v = batch(3, 2).value(2);
  const parts = v.split(".");
  for (const value of [
    parts.slice(0, 4).join("."),
    v + ".",
    v + "." + parts[4],
    "." + v,
    v.replace(/\./g, ".."),
    parts[0] + ".",
    [parts[0], ...parts.slice(2)].join("."),
    [parts[0], parts[2], parts[1], parts[3], parts[4]].join("."),
    "....",
  ]) {
    refused(value);
  }
});

test("the size is signed", () => {
  // Index 1 walks the same path in batches of 5 to 8: the root is the
  // same, the signed size tells them apart, so only 5 verifies.
  const b = batch(5, 1);
  verifies(b.value(1));
  for (const size of [6, 7, 8]) refused(b.value(1, { size: String(size) }));
  refused(b.value(1, { size: "4" })); // one hash fewer needed: too long
  refused(b.value(1, { size: "9" })); // one hash more needed: too short
  // The root signed without its size (the message before the size was
  // signed) is no batch signature.
  const unsized = ed(Buffer.from(`23:toolgate-event-batch-v1\n${mth(b.leaves).toString("hex")}`));
  refused(b.value(1, { sig: b64(unsized) }));
});

test("the two forms do not mix", () => {
  const b = batch(2, 1);
  const single = b64(ed(input));
  verifies(single); // the single form, same key, still verifies
  refused(b.value(1, { sig: single })); // a single form signature in a co-signed value
  refused(b.value(1).split(".")[0]); // the batch signature alone
  // The event signed alone, as a batch of one: the leaf is no root.
  const one = b64(ed(batchMessage(1, leaf(b.salts[1], input))));
  refused(b.value(1, { sig: one, size: "1", index: "0", path: "" }));
});

test("any change of the value is refused", () => {
  const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ \u0660";
  for (const size of [2, 3, 5, 8]) {
    const v = batch(size, size - 1).value(size - 1);
    verifies(v);
    for (let k = 0; k < 300; k++) {
      const s = [...v];
      const at = rand(s.length);
      const what = rand(3);
      if (what === 0) {
        const others = chars.replace(s[at], "");
        s[at] = others[rand(others.length)];
      } else if (what === 1) {
        s.splice(at, 0, chars[rand(chars.length)]);
      } else {
        s.splice(at, 1);
      }
      refused(s.join(""));
    }
  }
});
