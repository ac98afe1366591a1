// What verifying a result costs the TypeScript client, in µs per result:
// a result with a 1 KiB output in binary mode (as pkg/eventsig's Go
// benchmark reads it), signed by a worker whose JWT a freshly made
// account issued, alone or co-signed with its audit event (one signature
// over the Merkle root of the two, the event carrying its inclusion
// path). Baselines in the same run: decoding only (what a reader that
// verifies nothing spends), and the ed25519 check done with nkeys.js
// (tweetnacl) instead of node:crypto.
//
//   npm run build && node bench/verify.mjs [iterations] [rounds]
import { createAccount, createUser } from "@nats-io/nkeys";
import { Verifier, decodeEvent, signingInput, agentKey } from "../dist/index.js";
import { fromPublic } from "@nats-io/nkeys";
import { createHash, randomBytes } from "node:crypto";

const n = Number(process.argv[2] ?? 3000);
const rounds = Number(process.argv[3] ?? 5);
const te = new TextEncoder();
const b64url = (b) => Buffer.from(b).toString("base64url");

const account = createAccount();
const user = createUser();
const head = b64url(te.encode(JSON.stringify({ typ: "JWT", alg: "ed25519-nkey" })));
const claims = b64url(
  te.encode(
    JSON.stringify({
      jti: "bench",
      iat: Math.floor(Date.now() / 1000),
      iss: account.getPublicKey(),
      name: "w1",
      sub: user.getPublicKey(),
      nats: { pub: {}, sub: {}, subs: -1, data: -1, payload: -1, tags: ["toolgate-role:worker"], type: "user", version: 2 },
    }),
  ),
);
const jwt = `${head}.${claims}.${b64url(account.sign(te.encode(`${head}.${claims}`)))}`;

const data = te.encode(
  JSON.stringify({
    call_id: "c1",
    agent: "ann",
    tool: "read",
    status: "ok",
    output: "x".repeat(1024),
    is_error: false,
    decision: { action: "allow", rule: "read-workspace" },
    duration_ms: 3,
  }),
);
const attrs = { type: "dev.toolgate.call.completed.v1", source: "toolgate://worker/w1", id: `${agentKey("ann", "c1")}:result`, subject: "c1" };
const sig = b64url(user.sign(signingInput(attrs.type, attrs.source, attrs.id, attrs.subject, data)));
const headers = {
  "ce-specversion": "1.0",
  "ce-id": attrs.id,
  "ce-source": attrs.source,
  "ce-type": attrs.type,
  "ce-subject": attrs.subject,
  "ce-time": "2026-01-02T03:04:05Z",
  "ce-toolgatesig": sig,
  "ce-toolgatesigner": jwt,
  "content-type": "application/json",
  "Nats-Msg-Id": attrs.id,
};

// Co-signed with its audit event: leaves SHA-256(0x00 || salt || input),
// the root SHA-256(0x01 || result leaf || audit leaf).
const sha = (...parts) => parts.reduce((h, p) => h.update(p), createHash("sha256")).digest();
const salt = randomBytes(16);
const resultLeaf = sha(Buffer.of(0), salt, signingInput(attrs.type, attrs.source, attrs.id, attrs.subject, data));
const auditLeaf = sha(Buffer.of(0), randomBytes(16), te.encode("the audit event's signing input"));
const root = sha(Buffer.of(1), resultLeaf, auditLeaf);
const batchSig = b64url(user.sign(te.encode(`23:toolgate-event-batch-v1\n2\n${root.toString("hex")}`)));
const cosigned = { ...headers, "ce-toolgatesig": `${batchSig}.0.2.${b64url(salt)}.${b64url(auditLeaf)}` };

const trusted = [account.getPublicKey()];
const warm = new Verifier(trusted);
const userKey = fromPublic(user.getPublicKey());

const cases = {
  "decode only (baseline)": () => {
    const ev = decodeEvent(headers, data);
    JSON.parse(new TextDecoder().decode(ev.data));
  },
  "verify, JWT kept (the client's path)": () => warm.result(headers, data, "ann", "c1"),
  "verify co-signed (batch of 2), JWT kept": () => warm.result(cosigned, data, "ann", "c1"),
  "verify, JWT checked every time": () => new Verifier(trusted).result(headers, data, "ann", "c1"),
  "ed25519 by nkeys.js/tweetnacl alone (baseline)": () => {
    const ev = decodeEvent(headers, data);
    if (!userKey.verify(signingInput(ev.type, ev.source, ev.id, ev.subject, ev.data), Buffer.from(sig, "base64url"))) throw new Error("bad");
  },
};

console.log(`node ${process.version}, ${n} results per round, ${rounds} rounds (µs per result)`);
for (const [name, fn] of Object.entries(cases)) {
  // The slow cases (milliseconds each) run a thirtieth as many times.
  const slow = name.includes("tweetnacl") || name.includes("every time");
  const iters = slow ? Math.max(10, Math.floor(n / 30)) : n;
  for (let i = 0; i < Math.min(iters, 100); i++) fn(); // warm up
  const us = [];
  for (let r = 0; r < rounds; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < iters; i++) fn();
    us.push(Number(process.hrtime.bigint() - t0) / 1000 / iters);
  }
  console.log(`${name.padEnd(48)} ${us.map((x) => x.toFixed(1)).join(", ")}`);
}
