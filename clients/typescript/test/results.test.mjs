// The cluster's share of a waiting call: a client's waiting calls share
// one subscription to their agent's results, and a result the
// subscription missed is still found by a look-up of the stored one.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { connect } from "../dist/index.js";
import { startFleet, needs, until } from "../testenv/fleet.mjs";

// Edits need a person: a call waits, parked, until approved.
const policy = "tools:\n  default: allow\n  edit:\n    action: ask\n";

const N = 5;
let fleet;
const clients = [];

before(async () => {
  if (!needs({ skip() {} }, "go", "golang-go")) return;
  const files = { "missed.txt": "draft\n", "across.txt": "draft\n" };
  for (let i = 0; i < N; i++) files[`shared-${i}.txt`] = "draft\n";
  fleet = await startFleet({ policy, files });
});

after(async () => {
  for (const c of clients) await c.close().catch(() => {});
  await fleet?.stop();
});

async function agent(name) {
  const c = await connect({ servers: fleet.url, creds: fleet.creds(name) });
  clients.push(c);
  return c;
}

function ready(t) {
  if (!fleet) {
    needs(t, "go", "golang-go");
    return false;
  }
  return true;
}

const edit = (path) => ({ path, old_string: "draft", new_string: "final" });

/** resultSubs counts the connection's subscriptions to the agent's results. */
function resultSubs(c) {
  return c.nc.protocol.subscriptions.all().filter((s) => s.getSubject().startsWith(`toolgate.result.${c.agent}.`)).length;
}

test("concurrent waiting calls share one results subscription", async (t) => {
  if (!ready(t)) return;
  const c = await agent("sharer");
  const handles = [];
  for (let i = 0; i < N; i++) {
    let parked;
    const p = new Promise((resolve) => (parked = resolve));
    handles.push({ h: await c.start("edit", edit(`shared-${i}.txt`), { onPending: parked }), parked: p });
  }
  for (const { parked } of handles) await parked;
  assert.equal(resultSubs(c), 1, `${N} waiting calls hold ${resultSubs(c)} results subscriptions`);
  // Each result still reaches its own call, and only its own.
  for (const { h } of handles) {
    const a = fleet.approve(h.id);
    assert.equal(a.code, 0, a.stderr);
  }
  for (let i = 0; i < N; i++) {
    const r = await handles[i].h.result;
    assert.equal(r.status, "ok");
    assert.equal(r.callId, handles[i].h.id);
    assert.equal(readFileSync(join(fleet.ws, `shared-${i}.txt`), "utf8"), "final\n");
  }
  assert.equal(c.refused, 0);
  // Kept a while for the calls that follow; then removed.
  assert.equal(resultSubs(c), 1);
  c.results.linger = 0;
  const again = await c.start("read", { path: "shared-0.txt" });
  assert.equal(resultSubs(c), 1);
  assert.equal((await again.result).status, "ok");
  await until("the idle results subscription removed", () => resultSubs(c) === 0);
});

test("a reconnect is counted, and a call waiting across it gets its result", async (t) => {
  if (!ready(t)) return;
  const c = await agent("reconnecter");
  let parked;
  const p = new Promise((resolve) => (parked = resolve));
  const h = await c.start("edit", edit("across.txt"), { onPending: parked });
  await p;
  assert.equal(c.results.reconnects, 0);
  await c.nc.reconnect();
  await until("the reconnect counted", () => c.results.reconnects === 1);
  assert.equal(resultSubs(c), 1);
  const a = fleet.approve(h.id);
  assert.equal(a.code, 0, a.stderr);
  const r = await h.result;
  assert.equal(r.status, "ok");
  assert.equal(readFileSync(join(fleet.ws, "across.txt"), "utf8"), "final\n");
});

test("a result published while the call was not subscribed is found by a look-up", async (t) => {
  if (!ready(t)) return;
  const c = await agent("misser");
  // Submitted with nobody listening; it ends, its result published to no one.
  const id = await c.submit("edit", edit("missed.txt"));
  await until("the call is parked", async () => (await c.result(id))?.status === "pending");
  const a = fleet.approve(id);
  assert.equal(a.code, 0, a.stderr);
  await until("the result is stored", async () => (await c.result(id))?.status === "ok");
  // The same id again is stored once and never run twice: its live result
  // was published before this wait subscribed, only the look-up finds it.
  const r = await c.call("edit", edit("missed.txt"), { id, timeout: 120_000 });
  assert.equal(r.status, "ok");
  assert.equal(r.callId, id);
  assert.equal(readFileSync(join(fleet.ws, "missed.txt"), "utf8"), "final\n");
  assert.equal(c.refused, 0);
});
