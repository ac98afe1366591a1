// Credentials: an agent's .creds file as `toolctl creds agent NAME`
// writes it (a NATS user JWT and the user's nkey seed).

import { readFileSync } from "node:fs";
import { fromSeed } from "@nats-io/nkeys";
import { isAccountKey } from "./signature.js";

/** ENV_CREDS names the credentials file used when none is given. */
export const ENV_CREDS = "TOOLGATE_CREDS";

const ROLE_TAG = "toolgate-role:";
const SERVICES_TAG = "toolgate-services:";

/** Creds are an identity's credentials, as read from a .creds file. */
export interface Creds {
  /** jwt is the encoded user JWT. */
  jwt: string;
  /** bytes are the file's content, for the NATS authenticator. */
  bytes: Uint8Array;
  /** name is the identity's name: for an agent, its agent id. */
  name: string;
  /** role is what the JWT's toolgate-role tag names (agent for an agent). */
  role: string;
  /** account is the public key of the account that issued the JWT. */
  account: string;
  /**
   * services is the account whose workers answer this identity: for an
   * agent, the toolgate account its JWT's toolgate-services tag names.
   * A reader of signed results trusts this one.
   */
  services: string;
  /** inboxPrefix is the inbox prefix these credentials must use (_INBOX_<agent> for an agent). */
  inboxPrefix: string;
}

/** CredsError reports a credentials file that is not a toolgate identity's. */
export class CredsError extends Error {
  constructor(message: string) {
    super(`invalid credentials: ${message}`);
    this.name = "CredsError";
  }
}

const block = /-{3,}[^\n]*-{3,}\r?\n\s*([^\s-][^\n]*?)\s*\r?\n\s*-{3,}[^\n]*-{3,}/g;

/** parseCreds reads the content of a .creds file. Its errors never quote it. */
export function parseCreds(content: Uint8Array | string): Creds {
  const text = typeof content === "string" ? content : new TextDecoder().decode(content);
  const blocks = [...text.matchAll(block)].map((m) => m[1]);
  if (blocks.length < 2) {
    throw new CredsError("no user JWT and nkey seed blocks");
  }
  const [jwt, seed] = blocks;
  let claims: Record<string, unknown>;
  try {
    const parts = jwt.split(".");
    if (parts.length !== 3) throw new Error();
    claims = JSON.parse(Buffer.from(parts[1], "base64url").toString("utf8"));
  } catch {
    throw new CredsError("the user JWT does not decode");
  }
  let pub: string;
  try {
    pub = fromSeed(new TextEncoder().encode(seed)).getPublicKey();
  } catch {
    throw new CredsError("no user nkey seed");
  }
  if (pub !== claims.sub) {
    throw new CredsError("the nkey seed is not the JWT's user");
  }
  const nats = (claims.nats ?? {}) as Record<string, unknown>;
  const issuer = typeof nats.issuer_account === "string" && nats.issuer_account ? nats.issuer_account : String(claims.iss ?? "");
  if (!isAccountKey(issuer)) {
    throw new CredsError("the issuer is not an account key");
  }
  let role = "";
  let services = issuer;
  for (const t of Array.isArray(nats.tags) ? nats.tags : []) {
    const tag = String(t);
    if (tag.startsWith(SERVICES_TAG)) {
      // Tags are stored lower-cased; account keys are upper-case base32.
      const a = tag.slice(SERVICES_TAG.length).toUpperCase();
      if (isAccountKey(a)) {
        services = a;
      }
    }
    if (tag.startsWith(ROLE_TAG)) {
      role = tag.slice(ROLE_TAG.length);
    }
  }
  const name = typeof claims.name === "string" ? claims.name : "";
  if (!role) {
    throw new CredsError(`user ${JSON.stringify(name)} has no ${ROLE_TAG} tag (not issued by toolgate)`);
  }
  if (!name) {
    throw new CredsError("the JWT names no identity");
  }
  const inboxPrefix = role === "agent" ? `_INBOX_${name}` : `_INBOX.${role}.${name}`;
  return { jwt, bytes: new TextEncoder().encode(text), name, role, account: issuer, services, inboxPrefix };
}

/** loadCreds reads a .creds file (default: the file $TOOLGATE_CREDS names). */
export function loadCreds(path?: string): Creds {
  const file = path || process.env[ENV_CREDS];
  if (!file) {
    throw new CredsError(`no credentials: give an agent's .creds file or set ${ENV_CREDS}`);
  }
  let content: Buffer;
  try {
    content = readFileSync(file);
  } catch (e) {
    throw new CredsError(`${file}: ${(e as Error).message}`);
  }
  try {
    return parseCreds(content);
  } catch (e) {
    throw new CredsError(`${file}: ${(e as Error).message.replace(/^invalid credentials: /, "")}`);
  }
}
