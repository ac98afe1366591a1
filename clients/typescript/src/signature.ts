// The signature format of the events a worker makes, as pkg/eventsig's
// documentation specifies it: what a reader decodes, the bytes the
// signature covers, and the checks, in their order, whose first failure
// names the refusal. The vectors in pkg/eventsig/testdata/vectors.json are
// its test.

import { createHash, createPublicKey, verify as ed25519Verify, type KeyObject } from "node:crypto";
import { createRequire } from "node:module";
import { fromPublic } from "@nats-io/nkeys";

/**
 * sodium is libsodium's signature check (the optional dependency
 * sodium-native), when it is installed: about twice as fast as the
 * OpenSSL check behind node:crypto (52 against 108 µs per signature on
 * the machine BENCHMARKS.md names), and a result's check is mostly that.
 * Without it, node:crypto checks the same signatures.
 */
interface Sodium {
  crypto_sign_verify_detached(signature: Uint8Array, message: Uint8Array, publicKey: Uint8Array): boolean;
}
const sodium: Sodium | undefined = (() => {
  try {
    return createRequire(import.meta.url)("sodium-native") as Sodium;
  } catch {
    return undefined;
  }
})();

/** SIGNATURE_BACKEND names what checks the ed25519 signatures: "libsodium" or "node:crypto". */
export const SIGNATURE_BACKEND = sodium ? "libsodium" : "node:crypto";

/** ed25519 checks sig over msg by signer s. */
function ed25519(s: Signer, msg: Uint8Array, sig: Uint8Array): boolean {
  if (sodium) {
    return sodium.crypto_sign_verify_detached(sig, msg, s.raw);
  }
  return ed25519Verify(null, msg, s.key, sig);
}

/** SIGNATURE_FORMAT names the format: the first field of every signing input. */
export const SIGNATURE_FORMAT = "toolgate-event-signature-v1";

/** CloudEvents types a client reads. */
export const TYPE_CALL_REQUESTED = "dev.toolgate.call.requested.v1";
/** TYPE_CALL_COMPLETED is the type of a result. */
export const TYPE_CALL_COMPLETED = "dev.toolgate.call.completed.v1";
/** TYPE_CALL_PROGRESS is the type of a progress chunk. */
export const TYPE_CALL_PROGRESS = "dev.toolgate.call.progress.v1";

/** WORKER_SOURCE starts the source of every event a worker makes. */
export const WORKER_SOURCE = "toolgate://worker/";

/** RefusalReason names why an event was refused, as the Go reader names it. */
export type RefusalReason =
  | "malformed"
  | "unsigned"
  | "bad-jwt"
  | "foreign-issuer"
  | "expired"
  | "wrong-role"
  | "bad-signature"
  | "wrong-type"
  | "wrong-source"
  | "wrong-call"
  | "wrong-agent"
  | "wrong-tool";

/** RefusedError is an event the reader refused; reason says why. */
export class RefusedError extends Error {
  /** reason is the refusal's name (pkg/eventsig.Reason). */
  readonly reason: RefusalReason;
  /** eventId is the refused event's id, when it had one. */
  readonly eventId: string;
  constructor(reason: RefusalReason, message: string, eventId = "") {
    super(`event refused (${reason})${eventId ? `: ${eventId}` : ""}: ${message}`);
    this.name = "RefusedError";
    this.reason = reason;
    this.eventId = eventId;
  }
}

/** Status is the outcome of a call as its result reports it. */
export type Status =
  | "ok"
  | "error"
  | "denied"
  | "pending"
  | "rejected"
  | "expired"
  | "timeout"
  | "interrupted"
  | "cancelled";

/** Decision is the policy decision a result carries. */
export interface Decision {
  /** action is allow, ask or deny. */
  action: string;
  /** rule is the id of the policy rule that decided. */
  rule?: string;
  /** reason says why, for a person. */
  reason?: string;
  /** offending is the part of compound input that decided. */
  offending?: string;
  /** revision is the policy's revision. */
  revision?: string;
  /** approvers are the people who approved the call. */
  approvers?: string[];
}

/** ResultData is the data of a result (dev.toolgate.call.completed.v1). */
export interface ResultData {
  call_id: string;
  agent: string;
  tool: string;
  session_id?: string;
  status: Status;
  output: string;
  is_error: boolean;
  metadata?: Record<string, unknown>;
  decision?: Decision;
  duration_ms: number;
  error?: string;
  parent_call_id?: string;
  cached?: boolean;
  hooks?: unknown[];
}

/** Headers are a message's NATS headers: a plain object, or nats.js MsgHdrs. */
export type Headers =
  | Record<string, string | string[]>
  | { keys(): string[]; values(k: string): string[] }
  | undefined
  | null;

/** CloudEvent is a decoded event: the attributes the signature covers and its data bytes. */
export interface CloudEvent {
  id: string;
  source: string;
  type: string;
  subject: string;
  datacontenttype: string;
  /** extensions are the string extension attributes (toolgatesig, toolgatesigner, ...). */
  extensions: Record<string, string>;
  /** data are the data bytes exactly as the signature covers them. */
  data: Uint8Array;
}

const te = new TextEncoder();
const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * signingInput is what an event's signature covers (pkg/events.SigningInput):
 * the five length-prefixed fields, then the hex SHA-256 of the data bytes.
 */
export function signingInput(type: string, source: string, id: string, subject: string, data: Uint8Array): Buffer {
  let head = "";
  for (const f of [SIGNATURE_FORMAT, type, source, id, subject]) {
    head += `${Buffer.byteLength(f, "utf8")}:${f}\n`;
  }
  return Buffer.from(head + createHash("sha256").update(data).digest("hex"), "utf8");
}

/** headerFirst maps each header name, lower-cased, to its first value. */
function headerFirst(h: Headers): Map<string, string> {
  const out = new Map<string, string>();
  if (!h) {
    return out;
  }
  if (typeof (h as { keys?: unknown }).keys === "function" && typeof (h as { values?: unknown }).values === "function") {
    const mh = h as { keys(): string[]; values(k: string): string[] };
    for (const k of mh.keys()) {
      const lk = k.toLowerCase();
      const vs = mh.values(k);
      if (!out.has(lk) && vs.length > 0) {
        out.set(lk, vs[0]);
      }
    }
    return out;
  }
  for (const [k, v] of Object.entries(h as Record<string, string | string[]>)) {
    const lk = k.toLowerCase();
    const first = Array.isArray(v) ? v[0] : v;
    if (!out.has(lk) && first !== undefined) {
      out.set(lk, first);
    }
  }
  return out;
}

const hexDigit = /^[0-9a-fA-F]{2}$/;

/**
 * unescape percent-decodes a header value as Go's url.PathUnescape does:
 * %XX only, '+' stays; a value with a bad escape is taken as written.
 */
function unescape(s: string): string {
  if (!s.includes("%")) {
    return s;
  }
  const bytes: number[] = [];
  const raw = te.encode(s);
  for (let i = 0; i < raw.length; i++) {
    if (raw[i] !== 0x25) {
      bytes.push(raw[i]);
      continue;
    }
    const hx = String.fromCharCode(raw[i + 1] ?? 0, raw[i + 2] ?? 0);
    if (i + 2 >= raw.length || !hexDigit.test(hx)) {
      return s;
    }
    bytes.push(parseInt(hx, 16));
    i += 2;
  }
  try {
    return utf8.decode(Uint8Array.from(bytes));
  } catch {
    // Not UTF-8: the reader keeps no bytes it cannot represent; refuse.
    throw new RefusedError("malformed", "a header value percent-decodes to bytes that are not UTF-8");
  }
}

const rfc3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;
const extensionName = /^[a-z0-9]{1,20}$/;
const jsonMediaTypes = new Set([
  "application/json",
  "text/json",
  "application/cloudevents+json",
  "application/cloudevents-batch+json",
]);
const std64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/**
 * decodeEvent reads a CloudEvent from a NATS message in any content mode
 * (binary, structured, structured without headers); a message that is
 * none of them throws a RefusedError "malformed".
 */
export function decodeEvent(headers: Headers, payload: Uint8Array): CloudEvent {
  const h = headerFirst(headers);
  const sv = h.get("ce-specversion");
  if (sv) {
    return decodeBinary(h, payload, sv);
  }
  const ct = h.get("content-type");
  if (ct && !ct.toLowerCase().startsWith("application/cloudevents+json")) {
    throw new RefusedError("malformed", `no ce-specversion header and content-type is ${ct}`);
  }
  return decodeStructured(payload);
}

function decodeBinary(h: Map<string, string>, payload: Uint8Array, sv: string): CloudEvent {
  const id = unescape(h.get("ce-id") ?? "");
  if (sv !== "1.0") {
    throw new RefusedError("malformed", `ce-specversion is ${JSON.stringify(sv)}, want "1.0"`, id);
  }
  const ev: CloudEvent = { id: "", source: "", type: "", subject: "", datacontenttype: "", extensions: {}, data: payload };
  for (const [k, raw] of h) {
    if (!k.startsWith("ce-")) {
      continue;
    }
    const name = k.slice(3);
    const v = unescape(raw);
    switch (name) {
      case "specversion":
      case "dataschema":
        break;
      case "id":
        ev.id = v;
        break;
      case "source":
        ev.source = v;
        break;
      case "type":
        ev.type = v;
        break;
      case "subject":
        ev.subject = v;
        break;
      case "time":
        if (!rfc3339.test(v)) {
          throw new RefusedError("malformed", `ce-time is not RFC 3339: ${v}`, id);
        }
        break;
      default:
        if (extensionName.test(name)) {
          ev.extensions[name] = v;
        }
    }
  }
  ev.datacontenttype = h.get("content-type") ?? "";
  return checkRequired(ev);
}

function checkRequired(ev: CloudEvent): CloudEvent {
  if (!ev.id) {
    throw new RefusedError("malformed", "the event has no id (ce-id)");
  }
  if (!ev.source) {
    throw new RefusedError("malformed", "missing required attribute source", ev.id);
  }
  if (!ev.type) {
    throw new RefusedError("malformed", "missing required attribute type", ev.id);
  }
  return ev;
}

/** isSpace is JSON's insignificant whitespace (and the other ASCII spaces Go trims). */
function isSpace(b: number): boolean {
  return b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0d || b === 0x0b || b === 0x0c;
}

function decodeStructured(payload: Uint8Array): CloudEvent {
  let start = 0;
  let end = payload.length;
  while (start < end && isSpace(payload[start])) start++;
  while (end > start && isSpace(payload[end - 1])) end--;
  const body = payload.subarray(start, end);
  if (body.length === 0 || body[0] !== 0x7b) {
    const what = body.length === 0 ? "an empty payload" : "a payload that is not a JSON object";
    throw new RefusedError("malformed", `no ce-specversion header and ${what}`);
  }
  let obj: Record<string, unknown>;
  try {
    obj = JSON.parse(Buffer.from(body.buffer, body.byteOffset, body.length).toString("utf8"));
  } catch (e) {
    throw new RefusedError("malformed", `invalid JSON: ${(e as Error).message}`);
  }
  const idOf = typeof obj.id === "string" ? obj.id : "";
  if (obj.specversion === undefined || obj.specversion === null) {
    throw new RefusedError("malformed", "structured event without specversion", idOf);
  }
  if (obj.specversion !== "1.0") {
    throw new RefusedError("malformed", `specversion is ${JSON.stringify(obj.specversion)}, want "1.0"`, idOf);
  }
  const str = (name: string): string => {
    const v = obj[name];
    if (v === undefined || v === null) {
      return "";
    }
    if (typeof v !== "string") {
      throw new RefusedError("malformed", `attribute ${name} is not a string`, idOf);
    }
    return v;
  };
  const ev: CloudEvent = {
    id: str("id"),
    source: str("source"),
    type: str("type"),
    subject: str("subject"),
    datacontenttype: str("datacontenttype"),
    extensions: {},
    data: new Uint8Array(0),
  };
  const time = str("time");
  if (time && !rfc3339.test(time)) {
    throw new RefusedError("malformed", `time is not RFC 3339: ${time}`, idOf);
  }
  for (const [k, v] of Object.entries(obj)) {
    if (typeof v === "string" && extensionName.test(k)) {
      ev.extensions[k] = v;
    }
  }
  if ("data_base64" in obj) {
    const b = obj.data_base64;
    if (typeof b !== "string" || !std64.test(b)) {
      throw new RefusedError("malformed", "data_base64 is not standard base64", idOf);
    }
    ev.data = Buffer.from(b, "base64");
  } else {
    const mt = ev.datacontenttype.split(";")[0].trim();
    if (ev.datacontenttype === "" || jsonMediaTypes.has(mt)) {
      const span = dataSpan(body);
      ev.data = span ? body.subarray(span[0], span[1]) : new Uint8Array(0);
    } else if ("data" in obj) {
      if (typeof obj.data !== "string") {
        throw new RefusedError("malformed", `data of media type ${mt} is not a string`, idOf);
      }
      ev.data = te.encode(obj.data);
    }
  }
  return checkRequired(ev);
}

/**
 * dataSpan finds the member "data" of the JSON object in body (valid
 * JSON, already parsed once) and returns where its text stands: from the
 * first byte after the ':' that follows its name to the last byte of its
 * value. When the member occurs twice the last one counts.
 */
function dataSpan(body: Uint8Array): [number, number] | undefined {
  let i = 1;
  let found: [number, number] | undefined;
  const skipSpace = () => {
    while (i < body.length && isSpace(body[i])) i++;
  };
  const skipString = () => {
    i++; // the opening quote
    while (i < body.length && body[i] !== 0x22) {
      i += body[i] === 0x5c ? 2 : 1;
    }
    i++; // the closing quote
  };
  const skipValue = () => {
    if (body[i] === 0x22) {
      skipString();
      return;
    }
    if (body[i] === 0x7b || body[i] === 0x5b) {
      let depth = 0;
      do {
        if (body[i] === 0x22) {
          skipString();
          continue;
        }
        if (body[i] === 0x7b || body[i] === 0x5b) depth++;
        if (body[i] === 0x7d || body[i] === 0x5d) depth--;
        i++;
      } while (depth > 0 && i < body.length);
      return;
    }
    // A number or a literal: up to the next delimiter.
    while (i < body.length && body[i] !== 0x2c && body[i] !== 0x7d && body[i] !== 0x5d && !isSpace(body[i])) i++;
  };
  for (;;) {
    skipSpace();
    if (i >= body.length || body[i] === 0x7d) {
      return found;
    }
    const keyStart = i;
    skipString();
    const key = JSON.parse(Buffer.from(body.buffer, body.byteOffset + keyStart, i - keyStart).toString("utf8"));
    skipSpace();
    i++; // ':'
    const valueStart = i;
    skipSpace();
    skipValue();
    if (key === "data") {
      found = [valueStart, i];
    }
    skipSpace();
    if (body[i] === 0x2c) i++;
  }
}

/** Roles a toolgate user JWT may name. */
const knownRoles = new Set(["worker", "approver", "admin", "agent"]);

/** Signer is a worker JWT checked before: who it names and its key. */
interface Signer {
  name: string;
  publicKey: string;
  key: KeyObject;
  raw: Uint8Array; // the ed25519 public key
  expires: number;
}

/** maxSigners bounds the JWTs a Verifier keeps (a fleet has few workers). */
const maxSigners = 1024;

/**
 * BATCH_FORMAT names the co-signed form: a signature over the Merkle root
 * of several events' signing inputs (the batch signing message is
 * "23:toolgate-event-batch-v1\n", the batch's size and "\n", then the
 * root's lower-case hex).
 */
export const BATCH_FORMAT = "toolgate-event-batch-v1";
const batchPrefix = `${BATCH_FORMAT.length}:${BATCH_FORMAT}\n`;

/** MAX_BATCH is the most events one co-signature may cover. */
export const MAX_BATCH = 65536;

const decimal = /^(?:0|[1-9][0-9]{0,5})$/;
const b64urlChars = /^[A-Za-z0-9_-]*$/;

/** b64urlStrict decodes canonical unpadded base64url: re-encoding the bytes gives s back. */
function b64urlStrict(s: string, what: string): Buffer {
  const b = b64urlChars.test(s) && s.length % 4 !== 1 ? Buffer.from(s, "base64url") : undefined;
  if (!b || b.toString("base64url") !== s) {
    throw new Error(`the ${what} is not canonical unpadded base64url`);
  }
  return b;
}

/** LEAF_TAG and NODE_TAG start the hashed bytes of a leaf and of an inner node. */
const LEAF_TAG = Uint8Array.of(0);
const NODE_TAG = Uint8Array.of(1);

/** merkleNode is an inner node of the batch's tree: SHA-256 of 0x01, left, right. */
function merkleNode(left: Uint8Array, right: Uint8Array): Buffer {
  return createHash("sha256").update(NODE_TAG).update(left).update(right).digest();
}

/**
 * cosignedMessage reads a co-signed toolgatesig value,
 * <sig>.<index>.<size>.<salt>.<path>, of the event whose signing input is
 * input: it returns the ed25519 signature and the batch signing message it
 * must verify over, whose root is what the event's leaf (SHA-256 of 0x00,
 * salt, input) and its inclusion path give (RFC 9162 §2.1.3.2); the size
 * is signed with it, which binds the index too (an event has one valid
 * co-signed value). It throws
 * an Error saying what is wrong when the value is not exactly that form
 * (pkg/eventsig).
 */
export function cosignedMessage(value: string, input: Uint8Array): { sig: Buffer; message: Buffer } {
  const parts = value.split(".");
  if (parts.length !== 5) {
    throw new Error(`${parts.length} parts, want 5`);
  }
  const [sigPart, indexPart, sizePart, saltPart, pathPart] = parts;
  if (!decimal.test(indexPart) || !decimal.test(sizePart)) {
    throw new Error("the index or size is not a decimal without leading zero");
  }
  const index = Number(indexPart);
  const size = Number(sizePart);
  if (size < 2 || size > MAX_BATCH || index >= size) {
    throw new Error(`index ${index} of size ${size} is out of range`);
  }
  const sig = b64urlStrict(sigPart, "signature");
  const salt = b64urlStrict(saltPart, "salt");
  const path = b64urlStrict(pathPart, "path");
  if (sig.length !== 64 || salt.length !== 16 || path.length % 32 !== 0) {
    throw new Error("the signature, salt or path has the wrong length");
  }
  let r: Buffer = createHash("sha256").update(LEAF_TAG).update(salt).update(input).digest();
  let fn = index;
  let sn = size - 1;
  for (let i = 0; i < path.length; i += 32) {
    if (sn === 0) {
      throw new Error("the path is longer than the tree is deep");
    }
    const p = path.subarray(i, i + 32);
    if ((fn & 1) === 1 || fn === sn) {
      r = merkleNode(p, r);
      while ((fn & 1) === 0 && fn !== 0) {
        fn >>= 1;
        sn >>= 1;
      }
    } else {
      r = merkleNode(r, p);
    }
    fn >>= 1;
    sn >>= 1;
  }
  if (sn !== 0) {
    throw new Error("the path is shorter than the tree is deep");
  }
  return { sig, message: Buffer.from(`${batchPrefix}${sizePart}\n${r.toString("hex")}`, "utf8") };
}

/** ED25519_SPKI is the DER prefix of an ed25519 public key (RFC 8410). */
const ED25519_SPKI = Buffer.from("302a300506032b6570032100", "hex");

const base32Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/** nkeyRaw returns the 32-byte ed25519 key of a public nkey with prefix byte prefix. */
function nkeyRaw(key: string, prefix: number): Buffer | undefined {
  try {
    fromPublic(key); // checks the encoding and the CRC-16
  } catch {
    return undefined;
  }
  const out: number[] = [];
  let bits = 0;
  let acc = 0;
  for (const c of key) {
    const v = base32Alphabet.indexOf(c);
    if (v < 0) return undefined;
    acc = (acc << 5) | v;
    bits += 5;
    if (bits >= 8) {
      bits -= 8;
      out.push((acc >> bits) & 0xff);
    }
  }
  if (out.length !== 35 || out[0] !== prefix) {
    return undefined;
  }
  return Buffer.from(out.slice(1, 33));
}

/** PREFIX_ACCOUNT and PREFIX_USER are the nkey prefix bytes of "A" and "U" keys. */
const PREFIX_ACCOUNT = 0;
const PREFIX_USER = 20 << 3;

/** isAccountKey reports whether key is a valid public account nkey ("A..."). */
export function isAccountKey(key: string): boolean {
  return nkeyRaw(key, PREFIX_ACCOUNT) !== undefined;
}

/** b64url decodes a JWT part: base64url, unpadded (or padded, as old JWTs were). */
function b64url(part: string): Buffer {
  if (!/^[A-Za-z0-9_-]*={0,2}$/.test(part)) {
    throw new Error("a part is not base64url");
  }
  return Buffer.from(part.replace(/=+$/, ""), "base64url");
}

function b64urlJSON(part: string): Record<string, unknown> {
  const v = JSON.parse(b64url(part).toString("utf8"));
  if (v === null || typeof v !== "object" || Array.isArray(v)) {
    throw new Error("not a JSON object");
  }
  return v as Record<string, unknown>;
}

/**
 * Verifier checks the events a worker signed against the accounts a
 * reader trusts (pkg/eventsig.Verifier). It keeps the worker JWTs it
 * checked, so that a JWT is verified once until it expires.
 */
export class Verifier {
  readonly trusted: ReadonlySet<string>;
  private signers = new Map<string, Signer>();
  /** now is the clock, Unix seconds. */
  now: () => number = () => Math.floor(Date.now() / 1000);

  /** The trusted accounts are public account nkeys ("A..."); none refuses every event. */
  constructor(trustedAccounts: Iterable<string>) {
    const set = new Set<string>();
    let i = 0;
    for (const a of trustedAccounts) {
      const k = a.trim();
      if (!isAccountKey(k)) {
        throw new Error(`trusted account ${i} (${JSON.stringify(a)}) is not an nkey account public key (A...)`);
      }
      set.add(k);
      i++;
    }
    this.trusted = set;
  }

  /**
   * verify checks ev's signature (steps 2 to 7) and returns the worker's
   * name. toolgatesig is the event's own signature, or its co-signed form
   * (cosignedMessage); any failure of either is "bad-signature".
   */
  verify(ev: CloudEvent): string {
    const sig = ev.extensions.toolgatesig ?? "";
    const token = ev.extensions.toolgatesigner ?? "";
    if (!sig || !token) {
      throw new RefusedError("unsigned", "not signed", ev.id);
    }
    const s = this.signer(token, ev.id);
    const input = signingInput(ev.type, ev.source, ev.id, ev.subject, ev.data);
    if (sig.includes(".")) {
      // The co-signed form: one signature over a batch's Merkle root.
      let signed: { sig: Buffer; message: Buffer };
      try {
        signed = cosignedMessage(sig, input);
      } catch (e) {
        throw new RefusedError("bad-signature", `bad co-signature by key ${s.publicKey}: ${(e as Error).message}`, ev.id);
      }
      if (!ed25519(s, signed.message, signed.sig)) {
        throw new RefusedError("bad-signature", `bad co-signature by key ${s.publicKey}`, ev.id);
      }
      return s.name;
    }
    let raw: Buffer | undefined;
    try {
      raw = b64urlStrict(sig, "signature"); // canonical unpadded base64url, as Go reads it
    } catch {
      raw = undefined;
    }
    if (!raw || raw.length !== 64 || !ed25519(s, input, raw)) {
      throw new RefusedError("bad-signature", `bad signature by key ${s.publicKey}`, ev.id);
    }
    return s.name;
  }

  /** signer checks a worker's JWT (steps 3 to 6), once until it expires. */
  private signer(token: string, id: string): Signer {
    const now = this.now();
    const cached = this.signers.get(token);
    if (cached && (cached.expires === 0 || now < cached.expires)) {
      return cached;
    }
    const bad = (why: string) => new RefusedError("bad-jwt", `bad user JWT: ${why}`, id);
    const parts = token.split(".");
    if (parts.length !== 3) {
      throw bad(`${parts.length} parts`);
    }
    let claims: Record<string, unknown>;
    try {
      const head = b64urlJSON(parts[0]);
      const typ = String(head.typ ?? "").toUpperCase();
      const alg = String(head.alg ?? "").toLowerCase();
      if (typ !== "JWT" || (alg !== "ed25519-nkey" && alg !== "ed25519")) {
        throw new Error(`header ${JSON.stringify(head)}`);
      }
      claims = b64urlJSON(parts[1]);
    } catch (e) {
      throw bad((e as Error).message);
    }
    const nats = (claims.nats ?? {}) as Record<string, unknown>;
    if (nats.type !== "user" || nats.version !== 2) {
      throw bad("not a version 2 user JWT");
    }
    const iss = typeof claims.iss === "string" ? claims.iss : "";
    if (!isAccountKey(iss)) {
      throw bad("the issuer is not an account key");
    }
    // The issuer's signature over the first two parts (a version 2 JWT,
    // whatever its header's alg says, as the Go reader takes it).
    let signed = false;
    try {
      signed = fromPublic(iss).verify(te.encode(`${parts[0]}.${parts[1]}`), b64url(parts[2]));
    } catch (e) {
      throw bad((e as Error).message);
    }
    if (!signed) {
      throw bad("the issuer's signature does not verify");
    }
    const ia = typeof nats.issuer_account === "string" ? nats.issuer_account : "";
    if (!this.trusted.has(iss) || (ia !== "" && ia !== iss)) {
      throw new RefusedError("foreign-issuer", `JWT issued by an account not trusted here: ${iss}`, id);
    }
    const exp = typeof claims.exp === "number" ? claims.exp : 0;
    const nbf = typeof claims.nbf === "number" ? claims.nbf : 0;
    const name = typeof claims.name === "string" ? claims.name : "";
    if ((exp > 0 && now >= exp) || (nbf > 0 && now < nbf)) {
      throw new RefusedError("expired", `JWT of ${JSON.stringify(name)} expired or not yet valid`, id);
    }
    const tags = Array.isArray(nats.tags) ? nats.tags : [];
    const roles: string[] = [];
    for (const t of tags) {
      const lt = String(t).toLowerCase();
      if (lt.startsWith("toolgate-role:")) {
        roles.push(lt.slice("toolgate-role:".length));
      }
    }
    if (roles.length !== 1 || !knownRoles.has(roles[0])) {
      throw new RefusedError("wrong-role", `JWT of ${JSON.stringify(name)} names roles ${JSON.stringify(roles)}`, id);
    }
    if (name.trim() === "") {
      throw bad("the JWT names no identity");
    }
    if (roles[0] !== "worker") {
      throw new RefusedError("wrong-role", `${roles[0]}:${name} may not sign results (needs worker)`, id);
    }
    const sub = typeof claims.sub === "string" ? claims.sub : "";
    const raw = nkeyRaw(sub, PREFIX_USER);
    if (!raw) {
      throw bad(`public key ${sub}`);
    }
    const s: Signer = {
      name,
      publicKey: sub,
      key: createPublicKey({ key: Buffer.concat([ED25519_SPKI, raw]), format: "der", type: "spki" }),
      raw,
      expires: exp,
    };
    if (this.signers.size >= maxSigners) {
      this.signers.clear();
    }
    this.signers.set(token, s);
    return s;
  }

  /**
   * result decodes the result message of call callId of agent and returns
   * its data when it verifies: signed by a trusted worker, of type
   * dev.toolgate.call.completed.v1 from a worker source, with the call's id
   * in its subject attribute, event id and data, and the agent in its data.
   * tool, when given, must be the tool the result names. Anything else
   * throws a RefusedError.
   */
  result(headers: Headers, payload: Uint8Array, agent: string, callId: string, tool = ""): ResultData {
    const ev = decodeEvent(headers, payload);
    const r = resultData(ev);
    this.verify(ev);
    if (ev.type !== TYPE_CALL_COMPLETED) {
      throw new RefusedError("wrong-type", `${ev.id} is a ${ev.type}, not a result`, ev.id);
    }
    if (!ev.source.startsWith(WORKER_SOURCE)) {
      throw new RefusedError("wrong-source", `${ev.id} comes from ${ev.source}`, ev.id);
    }
    if (ev.subject !== callId || r.call_id !== callId || !ev.id.startsWith(agentKey(agent, callId) + ":")) {
      throw new RefusedError("wrong-call", `${ev.id} is the result of call ${JSON.stringify(r.call_id)}, not ${JSON.stringify(callId)}`, ev.id);
    }
    if (r.agent !== agent) {
      throw new RefusedError("wrong-agent", `${ev.id} is a result for agent ${JSON.stringify(r.agent)}, not ${JSON.stringify(agent)}`, ev.id);
    }
    if (tool !== "" && r.tool !== "" && r.tool !== tool) {
      throw new RefusedError("wrong-tool", `${ev.id} is a result of tool ${JSON.stringify(r.tool)}, not ${JSON.stringify(tool)}`, ev.id);
    }
    return r;
  }
}

const stringFields = ["call_id", "agent", "tool", "session_id", "status", "output", "error", "parent_call_id"] as const;

/** resultData reads an event's data as ResultData, as Go's json.Unmarshal would take it. */
function resultData(ev: CloudEvent): ResultData {
  let v: unknown;
  try {
    v = JSON.parse(utf8.decode(ev.data));
  } catch (e) {
    throw new RefusedError("malformed", `invalid JSON: ${(e as Error).message}`, ev.id);
  }
  if (v === null) {
    v = {};
  }
  if (typeof v !== "object" || Array.isArray(v)) {
    throw new RefusedError("malformed", "invalid JSON: the data is not an object", ev.id);
  }
  const o = v as Record<string, unknown>;
  const wrong = (f: string) => new RefusedError("malformed", `invalid JSON: ${f} has the wrong type`, ev.id);
  for (const f of stringFields) {
    if (o[f] === null || o[f] === undefined) {
      o[f] = f === "session_id" || f === "error" || f === "parent_call_id" ? undefined : "";
    } else if (typeof o[f] !== "string") {
      throw wrong(f);
    }
  }
  for (const f of ["is_error", "cached"]) {
    if (o[f] !== undefined && o[f] !== null && typeof o[f] !== "boolean") throw wrong(f);
  }
  if (o.duration_ms !== undefined && o.duration_ms !== null && !Number.isInteger(o.duration_ms)) throw wrong("duration_ms");
  for (const f of ["decision", "metadata"]) {
    if (o[f] !== undefined && o[f] !== null && (typeof o[f] !== "object" || Array.isArray(o[f]))) throw wrong(f);
  }
  o.is_error = o.is_error === true;
  o.duration_ms = typeof o.duration_ms === "number" ? o.duration_ms : 0;
  return o as unknown as ResultData;
}

const safeKey = /^[A-Za-z0-9=_-]{1,200}$/;

/**
 * agentKey is the key of the entry id owned by agent (pkg/events.AgentKey):
 * the id of every event a worker makes for a call starts with
 * agentKey(agent, call id) and ':'.
 */
export function agentKey(agent: string, id: string): string {
  if (safeKey.test(id)) {
    return `${agent}.${id}`;
  }
  return `${agent}.h${createHash("sha256").update(id, "utf8").digest("hex").slice(0, 32)}`;
}
