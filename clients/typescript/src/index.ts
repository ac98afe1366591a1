/**
 * @toolgate/client: agents written in TypeScript call tools through a
 * toolgate fleet over NATS. Every result is verified (the signature format
 * of pkg/eventsig) and refused when it does not verify.
 *
 *     import { connect } from "@toolgate/client";
 *     const c = await connect({ servers: "nats://127.0.0.1:4222", creds: "agent-7.creds" });
 *     const r = await c.call("read", { path: "README.md" }, { timeout: 30_000 });
 *     console.log(r.status, r.decision.action, r.output);
 */
export {
  connect,
  newCallId,
  Client,
  CallTimeoutError,
  CallCancelledError,
  type ConnectOptions,
  type CallOptions,
  type CallHandle,
  type Result,
  type Progress,
  type CancelReply,
  type ToolData,
} from "./client.js";
export { loadCreds, parseCreds, CredsError, ENV_CREDS, type Creds } from "./creds.js";
export {
  Verifier,
  RefusedError,
  decodeEvent,
  signingInput,
  cosignedMessage,
  agentKey,
  isAccountKey,
  SIGNATURE_FORMAT,
  BATCH_FORMAT,
  MAX_BATCH,
  TYPE_CALL_COMPLETED,
  TYPE_CALL_PROGRESS,
  TYPE_CALL_REQUESTED,
  WORKER_SOURCE,
  type RefusalReason,
  type CloudEvent,
  type Headers,
  type ResultData,
  type Decision,
  type Status,
} from "./signature.js";
