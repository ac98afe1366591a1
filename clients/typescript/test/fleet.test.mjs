// The client against a real fleet: the worker binary on its embedded
// NATS server, the approver service, agent credentials minted with
// toolctl. Each test asserts the outcome on the workspace as well as the
// result the client returns.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { connect as natsConnect, credsAuthenticator } from "@nats-io/transport-node";
import { connect, CallCancelledError } from "../dist/index.js";
import { startFleet, needs, until } from "../testenv/fleet.mjs";

// Every tool runs; edits need a person; rm is denied by a named rule.
const policy = `tools:
  default: allow
  edit:
    action: ask
  bash:
    blacklist: ["rm *"]
exec:
  security: full
  ask: off
  confirm_dangerous: false
`;

let fleet;
const clients = [];

before(async () => {
  if (!needs({ skip() {} }, "go", "golang-go")) return;
  fleet = await startFleet({ policy, files: {
      "hello.txt": "hello from the workspace\n",
      "forged.txt": "FORGED-BY-MALLORY\n",
      "approved.txt": "draft\n",
      "aborted.txt": "draft\n",
      "away.txt": "draft\n",
      "victim.txt": "draft\n",
      "closed.txt": "draft\n",
    }, });
});

after(async () => {
  for (const c of clients) await c.close().catch(() => {});
  await fleet?.stop();
});

/** agent connects as agent, with credentials minted by toolctl. */
async function agent(name, opts = {}) {
  const c = await connect({ servers: fleet.url, creds: fleet.creds(name), ...opts });
  clients.push(c);
  return c;
}

/** edit is the arguments of an edit of file from draft to final. */
const edit = (path) => ({ path, old_string: "draft", new_string: "final" });

/** ready skips a test when the fleet could not start for want of go. */
function ready(t) {
  if (!fleet) {
    needs(t, "go", "golang-go");
    return false;
  }
  return true;
}

test("read returns the file, allowed by the policy", async (t) => {
  if (!ready(t)) return;
  const c = await agent("ann");
  assert.equal(c.agent, "ann");
  const r = await c.call("read", { path: "hello.txt" }, { timeout: 60_000 });
  assert.equal(r.status, "ok");
  assert.match(r.output, /hello from the workspace/);
  assert.equal(r.decision.action, "allow");
  assert.equal(r.tool, "read");
  assert.equal(c.refused, 0);
});

test("a result co-signed with its audit event verifies; a changed proof is refused", async (t) => {
  if (!ready(t)) return;
  // The worker signs a call's result and its audit event with one
  // signature: the stored result carries the co-signed form.
  const c = await agent("ann");
  const r = await c.call("read", { path: "hello.txt" }, { timeout: 60_000 });
  const m = await c.nc.request(`toolgate.api.result.ann.${r.callId}`, undefined, { timeout: 10_000 });
  const headers = Object.fromEntries(m.headers.keys().map((k) => [k, m.headers.get(k)]));
  const sig = headers["ce-toolgatesig"];
  const parts = sig.split(".");
  assert.equal(parts.length, 5, `not co-signed: ${sig}`);
  assert.ok(Number(parts[2]) >= 2, sig);
  assert.equal(c.verifier.result(headers, m.data, "ann", r.callId).output, r.output);
  for (const [i, changed] of [[1, parts[2]], [2, "1"], [2, "0" + parts[2]], [3, "A".repeat(22)], [4, "A".repeat(parts[4].length)]]) {
    const forged = [...parts.slice(0, i), changed, ...parts.slice(i + 1)].join(".");
    assert.throws(() => c.verifier.result({ ...headers, "ce-toolgatesig": forged }, m.data, "ann", r.callId), (e) => e.reason === "bad-signature", forged);
  }
});

test("a denied bash returns denied with the rule, and the command never runs", async (t) => {
  if (!ready(t)) return;
  const c = await agent("ann");
  const r = await c.call("bash", { command: "rm -f hello.txt" }, { timeout: 60_000 });
  assert.equal(r.status, "denied");
  assert.equal(r.isError, true);
  assert.equal(r.decision.action, "deny");
  assert.equal(r.decision.rule, "tools.bash.blacklist[0]");
  assert.match(r.decision.reason, /rm \*/);
  assert.ok(existsSync(join(fleet.ws, "hello.txt")), "the denied rm removed the file");
});

test("an ask parks the call and it resumes after toolctl approvals approve", async (t) => {
  if (!ready(t)) return;
  const c = await agent("ann");
  let pending;
  const parked = new Promise((resolve) => (pending = resolve));
  const h = await c.start("edit", edit("approved.txt"), { onPending: pending, timeout: 120_000 });
  const p = await parked;
  assert.equal(p.status, "pending");
  assert.equal(p.decision.action, "ask");
  assert.equal(readFileSync(join(fleet.ws, "approved.txt"), "utf8"), "draft\n", "the edit ran before anyone approved it");
  const a = fleet.approve(h.id);
  assert.equal(a.code, 0, a.stderr);
  const r = await h.result;
  assert.equal(r.status, "ok");
  assert.equal(readFileSync(join(fleet.ws, "approved.txt"), "utf8"), "final\n");
});

test("a cancelled sleep ends cancelled", async (t) => {
  if (!ready(t)) return;
  const c = await agent("ann");
  const h = await c.start("bash", { command: "echo ready; sleep 120; touch slept.marker" }, { timeout: 120_000 });
  for await (const p of h.progress()) {
    if (p.chunk.includes("ready")) break;
  }
  const reply = await h.cancel();
  assert.equal(reply.state, "running", JSON.stringify(reply));
  const r = await h.result;
  assert.equal(r.status, "cancelled");
  assert.equal(existsSync(join(fleet.ws, "slept.marker")), false);
});

test("aborting a call's signal cancels it wherever it is", async (t) => {
  if (!ready(t)) return;
  const c = await agent("ann");
  const ac = new AbortController();
  const id = "abort-parked-1";
  const h = await c.start("edit", edit("aborted.txt"), { id, signal: ac.signal, onPending: () => ac.abort() });
  await assert.rejects(h.result, CallCancelledError);
  const r = await c.wait(id, { timeout: 60_000 });
  assert.equal(r.status, "cancelled");
  assert.equal(readFileSync(join(fleet.ws, "aborted.txt"), "utf8"), "draft\n");
});

test("progress arrives in order before the result", async (t) => {
  if (!ready(t)) return;
  const c = await agent("ann");
  const h = await c.start("bash", { command: "echo one; sleep 0.2; echo two; sleep 0.2; echo three" });
  let text = "";
  for await (const p of h.progress()) {
    assert.equal(p.stream, "stdout");
    text += p.chunk;
  }
  assert.equal(text, "one\ntwo\nthree\n");
  assert.equal((await h.result).status, "ok");
});

test("a result stored while the client was away is fetched on reconnect", async (t) => {
  if (!ready(t)) return;
  const first = await agent("cid");
  const id = await first.submit("edit", edit("away.txt"));
  await until("the call is parked", async () => (await first.result(id))?.status === "pending");
  await first.close();
  // The call finishes while no client of the agent is connected.
  const a = fleet.approve(id);
  assert.equal(a.code, 0, a.stderr);
  await until("the approved edit ran", () => readFileSync(join(fleet.ws, "away.txt"), "utf8") === "final\n");
  const again = await agent("cid");
  let stored;
  await until("the stored result is final", async () => {
    stored = await again.result(id);
    return stored && stored.status !== "pending";
  });
  assert.equal(stored.status, "ok");
  assert.equal(stored.callId, id);
  const r = await again.wait(id, { timeout: 60_000 });
  assert.equal(r.status, "ok");
  assert.equal(again.refused, 0);
  assert.equal(await again.result("never-called-1"), undefined);
});

test("a forged result published where an agent can publish is refused", async (t) => {
  if (!ready(t)) return;
  const refusals = [];
  const victim = await agent("victim", { onRefused: (e) => refusals.push(e.reason) });
  const mallory = await agent("mallory");
  // A real, signed result of mallory's own call, whose output mallory chose.
  const own = await mallory.call("read", { path: "forged.txt" }, { timeout: 60_000 });
  assert.equal(own.status, "ok");
  let pending;
  const parked = new Promise((resolve) => (pending = resolve));
  const h = await victim.start("edit", edit("victim.txt"), { onPending: pending, timeout: 120_000 });
  await parked;
  let settled = false;
  h.result.then(() => (settled = true), () => (settled = true));
  // Mallory, in the agents account, names the victim's result subject as
  // the reply of requests she may send: the worker's answer with her
  // stored result, and JetStream's acknowledgement of a call, land there.
  const raw = await natsConnect({
    servers: fleet.url,
    authenticator: credsAuthenticator(readFileSync(fleet.creds("mallory"))),
    inboxPrefix: "_INBOX_mallory",
  });
  const onVictim = `toolgate.result.victim.${h.id}`;
  raw.publish(`toolgate.api.result.mallory.${own.callId}`, undefined, { reply: onVictim });
  raw.publish("toolgate.call.mallory.read", new TextEncoder().encode('{"arguments":{"path":"forged.txt"}}'), { reply: onVictim });
  await raw.flush();
  await until("the victim refused both answers", () => victim.refused >= 2 || settled);
  await raw.close();
  if (settled) {
    assert.fail(`the victim's call took a forged result: ${JSON.stringify(await h.result.catch((e) => e.message))}`);
  }
  assert.ok(refusals.includes("wrong-call"), `refusals: ${refusals}`);
  const a = fleet.approve(h.id);
  assert.equal(a.code, 0, a.stderr);
  const r = await h.result;
  assert.equal(r.status, "ok");
  assert.doesNotMatch(r.output, /FORGED/);
  assert.equal(readFileSync(join(fleet.ws, "victim.txt"), "utf8"), "final\n");
});

test("results signed by a worker the client does not trust are refused", async (t) => {
  if (!ready(t)) return;
  // Trusting only the vectors' account: the fleet's worker is foreign.
  const refusals = [];
  const c = await agent("ann", {
    trustedAccounts: ["ABIDT3J6E3VUZ4RJUK6S3VGPRVIBXLRVW7L724LTCNRS4NRQNM2HEP56"],
    onRefused: (e) => refusals.push(e.reason),
  });
  const id = await c.submit("read", { path: "hello.txt" });
  await until("the result was refused", async () => {
    await c.result(id);
    return refusals.length > 0;
  });
  assert.deepEqual([...new Set(refusals)], ["foreign-issuer"]);
  await assert.rejects(c.wait(id, { timeout: 1000 }), /no final result/);
});

test("the AI SDK adapter makes valid tool() definitions the real ai package runs", async (t) => {
  if (!ready(t)) return;
  const { generateText, asSchema } = await import("ai");
  const { MockLanguageModelV3 } = await import("ai/test");
  const { aiTools } = await import("../dist/ai.js");
  const c = await agent("ann");
  const listing = await c.tools();
  const tools = await aiTools(c);
  assert.deepEqual(Object.keys(tools).sort(), listing.map((x) => x.name).sort());
  for (const want of ["read", "bash", "edit"]) {
    assert.ok(tools[want], `no AI SDK tool ${want}`);
    assert.equal(typeof tools[want].execute, "function");
  }
  // The input schema is the tool's JSON Schema, and the ai package
  // validates inputs with it.
  const read = listing.find((x) => x.name === "read");
  const schema = asSchema(tools.read.inputSchema);
  assert.deepEqual(await schema.jsonSchema, read.parameters);
  assert.equal(tools.read.description, read.description);

  // A model (the ai package's own test model) asks for read and then for
  // a denied rm: generateText validates the inputs, runs the tools
  // through the fleet and hands the model their verified results.
  let offered;
  const model = new MockLanguageModelV3({
    doGenerate: async (opts) => {
      offered = opts.tools;
      return {
        content: [
          { type: "tool-call", toolCallId: "t1", toolName: "read", input: JSON.stringify({ path: "hello.txt" }) },
          { type: "tool-call", toolCallId: "t2", toolName: "bash", input: JSON.stringify({ command: "rm -f hello.txt" }) },
        ],
        finishReason: { unified: "tool-calls", raw: undefined },
        usage: {
          inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
          outputTokens: { total: 1, text: 1, reasoning: undefined },
        },
        warnings: [],
      };
    },
  });
  const out = await generateText({ model, tools, prompt: "read hello.txt, then remove it" });
  const readDef = offered.find((x) => x.name === "read");
  assert.equal(readDef.type, "function");
  assert.deepEqual(readDef.inputSchema, read.parameters);
  const results = Object.fromEntries(out.toolResults.map((r) => [r.toolName, r.output]));
  assert.equal(results.read.status, "ok");
  assert.match(results.read.output, /hello from the workspace/);
  assert.equal(results.bash.status, "denied");
  assert.equal(results.bash.decision.rule, "tools.bash.blacklist[0]");
  assert.ok(existsSync(join(fleet.ws, "hello.txt")));

  // An input that does not match the schema is refused by the worker,
  // which validates every call's arguments against it.
  const bad = new MockLanguageModelV3({
    doGenerate: async () => ({
      content: [{ type: "tool-call", toolCallId: "t3", toolName: "read", input: JSON.stringify({ limit: "many" }) }],
      finishReason: { unified: "tool-calls", raw: undefined },
      usage: {
        inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
        outputTokens: { total: 1, text: 1, reasoning: undefined },
      },
      warnings: [],
    }),
  });
  const refused = await generateText({ model: bad, tools, prompt: "read" });
  assert.equal(refused.toolResults.length, 1, JSON.stringify(refused.content));
  const r = refused.toolResults[0].output;
  assert.equal(r.status, "error", JSON.stringify(r));
  assert.match(r.output, /path/, r.output);
});

test("the example calls a tool and prints the verified result", async (t) => {
  if (!ready(t)) return;
  const { spawnSync } = await import("node:child_process");
  const r = spawnSync(process.execPath, ["examples/call.mjs", "read", '{"path":"hello.txt"}'], {
    cwd: new URL("..", import.meta.url),
    env: { ...process.env, NATS_URL: fleet.url, TOOLGATE_CREDS: fleet.creds("example") },
    encoding: "utf8",
    timeout: 120_000,
  });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^status: ok$/m);
  assert.match(r.stdout, /^decision: allow \(rule tools\.default\)/m);
  assert.match(r.stdout, /hello from the workspace/);
});

test("connect refuses credentials that are not an agent's, and files that are not credentials", async (t) => {
  if (!ready(t)) return;
  const file = join(fleet.root, "alice-approver.creds");
  const r = fleet.toolctl("creds", "approver", "alice", "--out", file);
  assert.equal(r.code, 0, r.stderr);
  await assert.rejects(connect({ servers: fleet.url, creds: file }), /for approver "alice", an agent needs agent credentials/);
  await assert.rejects(connect({ servers: fleet.url, creds: join(fleet.ws, "hello.txt") }), /invalid credentials: .*hello\.txt: no user JWT/);
  await assert.rejects(connect({ servers: fleet.url, creds: join(fleet.root, "missing.creds") }), /invalid credentials: .*missing\.creds/);
});

test("progress of a call submitted elsewhere, until its result", async (t) => {
  if (!ready(t)) return;
  const a = await agent("ann");
  const h = await a.start("bash", { command: "echo ready; sleep 2; echo two; sleep 0.2; echo three" });
  for await (const p of h.progress()) {
    if (p.chunk.includes("ready")) break;
  }
  const b = await agent("ann");
  let text = "";
  for await (const p of b.progress(h.id)) text += p.chunk;
  assert.equal(text, "two\nthree\n");
  assert.equal((await h.result).status, "ok");
  // A call that has ended yields nothing and the loop ends.
  let after = 0;
  for await (const _ of b.progress(h.id)) after++;
  assert.equal(after, 0);
});

test("a call waiting when the client closes ends with an error; credentials may be given as content", async (t) => {
  if (!ready(t)) return;
  const c = await connect({ servers: fleet.url, creds: readFileSync(fleet.creds("ann"), "utf8") });
  assert.equal(c.agent, "ann");
  const h = await c.start("edit", edit("closed.txt"));
  await c.close();
  await assert.rejects(h.result, /connection closed/);
  const again = await agent("ann");
  assert.match((await again.cancel(h.id)).state, /^(queued|parked)$/);
});
