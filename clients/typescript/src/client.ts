// The agent client: publishes calls as CloudEvents on NATS and waits for
// their verified results (the wire contract of pkg/client).

import { randomBytes } from "node:crypto";
import {
  connect as natsConnect,
  credsAuthenticator,
  headers as natsHeaders,
  type Msg,
  type MsgHdrs,
  type NatsConnection,
  type Subscription,
} from "@nats-io/transport-node";
import { jetstream, type JetStreamClient } from "@nats-io/jetstream";
import { loadCreds, parseCreds, type Creds } from "./creds.js";
import { LookupSchedule, STORED_RESULT_CHECK } from "./lookup.js";
import { ResultMux } from "./results.js";
import {
  RefusedError,
  TYPE_CALL_PROGRESS,
  TYPE_CALL_REQUESTED,
  Verifier,
  decodeEvent,
  type Decision,
  type ResultData,
  type Status,
} from "./signature.js";

/** Options of connect. */
export interface ConnectOptions {
  /** servers are the NATS URLs (default $NATS_URL, else nats://127.0.0.1:4222). */
  servers?: string | string[];
  /** creds is the agent's .creds file, its path or its content (default $TOOLGATE_CREDS). */
  creds?: string | Uint8Array;
  /**
   * trustedAccounts are the account public keys (A...) whose workers'
   * results are accepted. Default: the toolgate account the credentials'
   * toolgate-services tag names, the install's own.
   */
  trustedAccounts?: string[];
  /** onRefused is told of every message refused as a result (forged, unsigned, another call's). */
  onRefused?: (err: RefusedError, callId: string) => void;
  /** name is the NATS connection name (default toolgate-agent-<agent>). */
  name?: string;
}

/** Options of one call. */
export interface CallOptions {
  /**
   * timeout bounds the wait for the final result, in ms (default: none).
   * When it passes the promise rejects with a CallTimeoutError; the call
   * goes on and its result stays stored (wait, result).
   */
  timeout?: number;
  /** toolTimeout asks for a shorter tool timeout than the tool's default, in ms. */
  toolTimeout?: number;
  /** id is the call id (default: 128 random bits). Publishing the same id again never runs the tool twice. */
  id?: string;
  /** session groups calls of one conversation. */
  session?: string;
  /** judgeOnly asks for a verdict only: an allowed or approved call is answered ok without running. */
  judgeOnly?: boolean;
  /** parent names the delegated task the call serves. */
  parent?: string;
  /** signal cancels the call when aborted: the cancellation is published and the promise rejects. */
  signal?: AbortSignal;
  /** onPending is called when the call is parked for a person's approval. */
  onPending?: (r: Result) => void;
  /** onProgress receives the call's progress while the tool runs, in order, before the result. */
  onProgress?: (p: Progress) => void;
}

/** Result is a call's verified result. */
export interface Result {
  callId: string;
  agent: string;
  tool: string;
  /** status is how the call ended (pending while parked). */
  status: Status;
  /** output is the tool's output (or what went wrong). */
  output: string;
  isError: boolean;
  /** decision is the policy's decision; action is "" when the call never reached the gate. */
  decision: Required<Pick<Decision, "action" | "rule" | "reason">> & Decision;
  durationMs: number;
  /** error is a machine-readable code for failures that did not come from the tool. */
  error?: string;
  cached?: boolean;
  /** data is the result's data as the worker signed it (snake_case, as on the wire). */
  data: ResultData;
}

/** Progress is a chunk of a running call's output (best effort; the result is authoritative). */
export interface Progress {
  callId: string;
  tool: string;
  /** stream is stdout, stderr, status or task. */
  stream: string;
  seq: number;
  chunk: string;
}

/** CancelReply says where a call was when its cancellation was handled. */
export interface CancelReply {
  call_id: string;
  agent: string;
  /** state is finished, queued, parked, running or unknown. */
  state: string;
  status?: Status;
  worker?: string;
  message: string;
  error?: string;
}

/** ToolData is a tool as a worker lists it. */
export interface ToolData {
  name: string;
  aliases?: string[];
  description?: string;
  kind?: string;
  version?: string;
  parameters?: Record<string, unknown>;
  worker: string;
}

/** CallTimeoutError: no final result came within the call's timeout. */
export class CallTimeoutError extends Error {
  readonly callId: string;
  constructor(callId: string, ms: number) {
    super(`waiting for result of ${callId}: no final result within ${ms} ms`);
    this.name = "CallTimeoutError";
    this.callId = callId;
  }
}

/** CallCancelledError: the call's signal was aborted; the call was cancelled. */
export class CallCancelledError extends Error {
  readonly callId: string;
  constructor(callId: string) {
    super(`waiting for result of ${callId}: cancelled`);
    this.name = "CallCancelledError";
    this.callId = callId;
  }
}

const te = new TextEncoder();
const td = new TextDecoder();

/** token checks that s can stand as one subject token (pkg/events.ValidToken). */
function validToken(what: string, s: string): string {
  if (!s) {
    throw new Error(`${what}: invalid subject token: empty`);
  }
  if (Buffer.byteLength(s) > 128) {
    throw new Error(`${what}: invalid subject token: longer than 128 bytes`);
  }
  for (const c of s) {
    const cp = c.codePointAt(0)!;
    if (c === "." || c === "*" || c === ">" || cp <= 0x20 || cp === 0x7f) {
      throw new Error(`${what}: invalid subject token: ${JSON.stringify(s)} contains ${JSON.stringify(c)}`);
    }
  }
  return s;
}

const base32 = "abcdefghijklmnopqrstuvwxyz234567";

/** newCallId returns a fresh call id: 128 random bits, lower-case base32 (pkg/events.NewID). */
export function newCallId(): string {
  const b = randomBytes(16);
  let out = "";
  let acc = 0;
  let bits = 0;
  for (const x of b) {
    acc = (acc << 8) | x;
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      out += base32[(acc >> bits) & 31];
    }
  }
  if (bits > 0) {
    out += base32[(acc << (5 - bits)) & 31];
  }
  return out;
}

/** toResult is the Result of verified result data. */
function toResult(d: ResultData): Result {
  const dec = d.decision ?? { action: "" };
  return {
    callId: d.call_id,
    agent: d.agent,
    tool: d.tool,
    status: d.status,
    output: d.output,
    isError: d.is_error,
    decision: { ...dec, action: dec.action ?? "", rule: dec.rule ?? "", reason: dec.reason ?? "" },
    durationMs: d.duration_ms,
    error: d.error,
    cached: d.cached,
    data: d,
  };
}

/** Queue hands messages from subscription callbacks to one waiter, in order. */
class Queue<T> {
  private items: T[] = [];
  private waiting: ((v: T | undefined) => void) | undefined;
  private closed = false;
  push(v: T): void {
    if (this.closed) return;
    if (this.waiting) {
      const w = this.waiting;
      this.waiting = undefined;
      w(v);
      return;
    }
    this.items.push(v);
  }
  close(): void {
    this.closed = true;
    this.waiting?.(undefined);
    this.waiting = undefined;
  }
  /** next resolves with the next item, or undefined once closed and drained. */
  next(): Promise<T | undefined> {
    if (this.items.length > 0) return Promise.resolve(this.items.shift());
    if (this.closed) return Promise.resolve(undefined);
    return new Promise((resolve) => (this.waiting = resolve));
  }
}

/** Heard is what a waiting call hears: a message, a stored result found, or a tick. */
type Heard = { msg: Msg } | { stored: Result } | { tick: true } | { stop: Error };

/**
 * CallHandle is a call in flight: its id, its progress as an async
 * iterator, and its final result.
 */
export interface CallHandle {
  /** id is the call id. */
  readonly id: string;
  /** result resolves with the final result (never pending). */
  readonly result: Promise<Result>;
  /** progress yields the call's progress chunks, in order, and ends with the call. */
  progress(): AsyncIterableIterator<Progress>;
  /** cancel cancels the call wherever it is; the result then ends cancelled. */
  cancel(): Promise<CancelReply>;
}

/** Client calls tools as one agent. */
export class Client {
  /** nc is the NATS connection. */
  readonly nc: NatsConnection;
  /** agent is the client's agent id. */
  readonly agent: string;
  /** verifier checks every result. */
  readonly verifier: Verifier;
  private js: JetStreamClient;
  private refusedCount = 0;
  private results: ResultMux;
  private onRefused?: (err: RefusedError, callId: string) => void;

  /** The constructor takes a connection made with the agent's credentials (see connect). */
  constructor(nc: NatsConnection, agent: string, trustedAccounts: string[], onRefused?: (err: RefusedError, callId: string) => void) {
    this.nc = nc;
    this.agent = validToken("agent id", agent);
    this.verifier = new Verifier(trustedAccounts);
    this.js = jetstream(nc);
    this.results = new ResultMux(nc, this.agent);
    this.onRefused = onRefused;
  }

  /** refused counts the messages refused as results: unsigned, forged, or another call's. */
  get refused(): number {
    return this.refusedCount;
  }

  /**
   * call runs tool with args and waits for its final result. It subscribes
   * to the agent's results (one subscription the client's waiting calls
   * share) before publishing, so a fast result is never
   * missed; a result that does not verify is refused and the wait goes on.
   */
  async call(tool: string, args?: unknown, opts: CallOptions = {}): Promise<Result> {
    const h = await this.start(tool, args, opts);
    return h.result;
  }

  /** start publishes a call and returns its handle without waiting for the result. */
  async start(tool: string, args?: unknown, opts: CallOptions = {}): Promise<CallHandle> {
    const id = opts.id ?? newCallId();
    validToken("call id", id);
    validToken("tool name", tool);
    const progress = new Queue<Progress>();
    const w = this.listen(id, opts, progress);
    try {
      await this.publish(tool, args, id, opts);
    } catch (e) {
      w.stop();
      progress.close();
      throw e;
    }
    const result = w.wait(true);
    result.catch(() => {}); // the caller's to handle; never unhandled here
    return this.handle(id, result, progress);
  }

  /** submit publishes a call and returns its id without waiting (see wait and result). */
  async submit(tool: string, args?: unknown, opts: CallOptions = {}): Promise<string> {
    const id = opts.id ?? newCallId();
    validToken("call id", id);
    validToken("tool name", tool);
    await this.publish(tool, args, id, opts);
    return id;
  }

  /**
   * wait waits for the final result of a call submitted earlier, including
   * one that arrived while nobody was listening (its stored result).
   */
  async wait(id: string, opts: CallOptions = {}): Promise<Result> {
    validToken("call id", id);
    const w = this.listen(id, opts, undefined);
    let stored: Result | undefined;
    try {
      stored = await this.result(id);
    } catch {
      stored = undefined; // no worker answered yet: the live result will come
    }
    if (stored && stored.status !== "pending") {
      w.stop();
      return stored;
    }
    return w.wait(false);
  }

  /**
   * progress yields the progress of a call submitted earlier, from now on,
   * in order, and ends when the call has its final result (live or
   * stored: a call that has already ended yields nothing). Breaking out
   * of the loop stops listening.
   */
  progress(id: string): AsyncIterableIterator<Progress> {
    validToken("call id", id);
    const q = new Queue<Progress>();
    const w = this.listen(id, {}, q);
    w.wait(false).catch(() => {}); // ends with the final result, closing q
    this.result(id)
      .then((r) => {
        if (r && r.status !== "pending") w.stop();
      })
      .catch(() => {});
    return iterate(q, w.stop);
  }

  /**
   * result fetches the latest stored result of a call (possibly pending)
   * from the workers (toolgate.api.result.<agent>.<id>): undefined when
   * none is stored, or when the stored one does not verify.
   */
  async result(id: string, timeout = 5000): Promise<Result | undefined> {
    validToken("call id", id);
    let m: Msg;
    try {
      m = await this.nc.request(`toolgate.api.result.${this.agent}.${id}`, undefined, { timeout });
    } catch (e) {
      throw new Error(`get result ${id} (is a worker running?): ${(e as Error).message}`, { cause: e });
    }
    const st = m.headers?.get("Toolgate-Status") ?? "";
    if (st.startsWith("404")) {
      return undefined;
    }
    if (st) {
      throw new Error(`get result ${id}: status ${st}`);
    }
    return this.verified(m, id);
  }

  /**
   * cancel cancels the call id of this agent wherever it is and says where
   * it was: queued, parked, running, finished or unknown. The cancelled
   * result follows on the call's result subject (wait).
   */
  async cancel(id: string, timeout = 20000): Promise<CancelReply> {
    validToken("call id", id);
    let m: Msg;
    try {
      m = await this.nc.request(`toolgate.cancel.${this.agent}.${id}`, undefined, { timeout });
    } catch (e) {
      throw new Error(`cancel ${id} (is a worker running?): ${(e as Error).message}`, { cause: e });
    }
    const r = JSON.parse(td.decode(m.data)) as CancelReply;
    if (r.error) {
      throw new Error(`cancel ${id}: ${r.error}`);
    }
    return r;
  }

  /** tools lists the tools this agent may call: the registry without what its policy denies outright. */
  async tools(timeout = 5000): Promise<ToolData[]> {
    const m = await this.nc.request(`toolgate.api.tools.${this.agent}`, te.encode(JSON.stringify({ agent: this.agent })), { timeout });
    const e = m.headers?.get("Nats-Service-Error");
    if (e) {
      throw new Error(`tool listing refused: ${e}`);
    }
    return JSON.parse(td.decode(m.data)) as ToolData[];
  }

  /** close drains and closes the connection. */
  async close(): Promise<void> {
    if (!this.nc.isClosed()) {
      await this.nc.drain();
    }
  }

  /** verified returns the result m carries for call id when it verifies; otherwise counts and reports the refusal. */
  private verified(m: Msg, id: string): Result | undefined {
    try {
      return toResult(this.verifier.result(m.headers, m.data, this.agent, id));
    } catch (e) {
      const err = e instanceof RefusedError ? e : new RefusedError("malformed", String(e));
      this.refusedCount++;
      this.onRefused?.(err, id);
      return undefined;
    }
  }

  private async publish(tool: string, args: unknown, id: string, o: CallOptions): Promise<void> {
    if (o.parent !== undefined) validToken("parent call id", o.parent);
    const data: Record<string, unknown> = { arguments: args ?? {} };
    if (o.session) data.session_id = o.session;
    if (o.toolTimeout) data.timeout_ms = Math.round(o.toolTimeout);
    if (o.judgeOnly) data.judge_only = true;
    if (o.parent) data.parent_call_id = o.parent;
    const h = natsHeaders();
    h.set("ce-specversion", "1.0");
    h.set("ce-id", id);
    h.set("ce-source", `agent://${this.agent}`);
    h.set("ce-type", TYPE_CALL_REQUESTED);
    h.set("ce-time", new Date().toISOString());
    h.set("content-type", "application/json");
    try {
      // The workers' intake stores an agent's calls: while none answers
      // (an election, every worker restarting) or an acknowledgement is
      // lost, the call is published again under its id (stored once),
      // backing off, for about 30 s as the Go client does.
      await this.js.publish(`toolgate.call.${this.agent}.${tool}`, te.encode(JSON.stringify(data)), { msgID: id, headers: h, retries: 12 });
    } catch (e) {
      throw new Error(`publish call ${id}: ${(e as Error).message}`, { cause: e });
    }
  }

  /**
   * listen waits on call id's results (the client's shared results
   * subscription) and, when someone takes it, subscribes to its progress
   * (a subject of the call's own); it returns the wait over what it hears.
   */
  private listen(id: string, o: CallOptions, progress: Queue<Progress> | undefined) {
    const heard = new Queue<Heard>();
    const subs: Subscription[] = [];
    const onMsg = (err: Error | null, msg: Msg | undefined) => {
      if (err) {
        heard.push({ stop: err });
        return;
      }
      if (msg) heard.push({ msg });
    };
    const unwait = this.results.wait(id, onMsg);
    const progressSubject = `toolgate.progress.${this.agent}.${id}`;
    if (progress || o.onProgress) {
      subs.push(this.nc.subscribe(progressSubject, { callback: onMsg }));
    }
    // A closed connection ends the wait (a closed queue ignores the push).
    this.nc.closed().then(() => heard.push({ stop: new Error(`waiting for result of ${id}: the connection closed`) }));
    const stop = () => {
      unwait();
      for (const s of subs) s.unsubscribe();
      heard.close();
      progress?.close();
    };
    const wait = async (cancelOnAbort: boolean): Promise<Result> => {
      // A live message can be missed (a reconnect during a long call, a
      // slow consumer); the stored result cannot, so look now and then
      // (LookupSchedule says when), one look-up at a time.
      let lookup = false;
      const sched = new LookupSchedule(Date.now(), this.results.reconnects, this.results.dropped);
      const ticker = setInterval(() => heard.push({ tick: true }), STORED_RESULT_CHECK);
      let timer: NodeJS.Timeout | undefined;
      if (o.timeout !== undefined && o.timeout > 0) {
        timer = setTimeout(() => heard.push({ stop: new CallTimeoutError(id, o.timeout!) }), o.timeout);
      }
      const onAbort = () => {
        if (cancelOnAbort) {
          // Fire and forget: the workers stop the call; its cancelled
          // result is stored as every result is.
          this.nc.publish(`toolgate.cancel.${this.agent}.${id}`);
        }
        heard.push({ stop: new CallCancelledError(id) });
      };
      if (o.signal?.aborted) onAbort();
      o.signal?.addEventListener("abort", onAbort, { once: true });
      try {
        for (;;) {
          const h = await heard.next();
          if (h === undefined) {
            throw new Error(`waiting for result of ${id}: the connection closed`);
          }
          if ("stop" in h) {
            throw h.stop;
          }
          if ("tick" in h) {
            if (!lookup && sched.due(Date.now(), this.results.reconnects, this.results.dropped)) {
              lookup = true;
              this.result(id, STORED_RESULT_CHECK)
                .then((r) => {
                  if (r && r.status !== "pending") heard.push({ stored: r });
                })
                .catch(() => {})
                .finally(() => (lookup = false));
            }
            continue;
          }
          if ("stored" in h) {
            return h.stored;
          }
          const m = h.msg;
          if (m.subject === progressSubject) {
            const p = progressOf(m, id);
            if (p) {
              o.onProgress?.(p);
              progress?.push(p);
            }
            continue;
          }
          // Refused: not this call's result, unsigned or forged (inside
          // the agents account another agent can make an answer land
          // here). The real one is still to come.
          const r = this.verified(m, id);
          if (!r) {
            continue;
          }
          if (r.status !== "pending") {
            return r;
          }
          o.onPending?.(r);
        }
      } finally {
        clearInterval(ticker);
        if (timer) clearTimeout(timer);
        o.signal?.removeEventListener("abort", onAbort);
        stop();
      }
    };
    return { wait, stop };
  }

  private handle(id: string, result: Promise<Result>, progress: Queue<Progress>): CallHandle {
    return { id, result, progress: () => iterate(progress), cancel: () => this.cancel(id) };
  }
}

/** iterate is q as an async iterator; onReturn runs when the loop is left early. */
function iterate(q: Queue<Progress>, onReturn?: () => void): AsyncIterableIterator<Progress> {
  const it: AsyncIterableIterator<Progress> = {
    next: async () => {
      const p = await q.next();
      return p === undefined ? { done: true, value: undefined } : { done: false, value: p };
    },
    return: async () => {
      onReturn?.();
      return { done: true, value: undefined };
    },
    [Symbol.asyncIterator]: () => it,
  };
  return it;
}

/** progressOf decodes a progress chunk of call id (best effort: anything else is dropped). */
function progressOf(m: Msg, id: string): Progress | undefined {
  try {
    const ev = decodeEvent(m.headers as MsgHdrs | undefined, m.data);
    if (ev.type !== TYPE_CALL_PROGRESS) return undefined;
    const d = JSON.parse(td.decode(ev.data)) as Record<string, unknown>;
    if (d.call_id !== id) return undefined;
    return {
      callId: id,
      tool: String(d.tool ?? ""),
      stream: String(d.stream ?? ""),
      seq: Number(d.seq ?? 0),
      chunk: String(d.chunk ?? ""),
    };
  } catch {
    return undefined;
  }
}

/**
 * connect connects to the fleet as the agent of an agent's .creds file
 * (`toolctl creds agent NAME`): authenticated by its JWT, with its inbox
 * prefix _INBOX_<agent>, trusting the workers of the toolgate account the
 * credentials name.
 */
export async function connect(opts: ConnectOptions = {}): Promise<Client> {
  let creds: Creds;
  if (opts.creds instanceof Uint8Array || (typeof opts.creds === "string" && opts.creds.includes("-----BEGIN"))) {
    creds = parseCreds(opts.creds);
  } else {
    creds = loadCreds(opts.creds);
  }
  if (creds.role !== "agent") {
    throw new Error(`invalid credentials: they are for ${creds.role} ${JSON.stringify(creds.name)}, an agent needs agent credentials`);
  }
  const servers = opts.servers ?? process.env.NATS_URL ?? "nats://127.0.0.1:4222";
  const nc = await natsConnect({
    servers,
    authenticator: credsAuthenticator(creds.bytes),
    inboxPrefix: creds.inboxPrefix,
    name: opts.name ?? `toolgate-agent-${creds.name}`,
    maxReconnectAttempts: -1,
  });
  try {
    return new Client(nc, creds.name, opts.trustedAccounts ?? [creds.services], opts.onRefused);
  } catch (e) {
    await nc.close();
    throw e;
  }
}
