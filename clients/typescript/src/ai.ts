/**
 * @toolgate/client/ai: the fleet's tools as Vercel AI SDK tool
 * definitions (`tool()` from the `ai` package, a peer dependency), ready
 * for generateText and streamText:
 *
 *     import { connect } from "@toolgate/client";
 *     import { aiTools } from "@toolgate/client/ai";
 *     const c = await connect({ creds: "agent-7.creds" });
 *     const tools = await aiTools(c);
 *     await generateText({ model, tools, prompt: "..." });
 *
 * Each tool's input schema is the tool's JSON Schema (jsonSchema()), and
 * its execute makes the call through the client: judged by the policy,
 * parked for a person on ask, verified before the model sees it.
 */

import { jsonSchema, tool, type Tool } from "ai";
import type { CallOptions, Client, Result, ToolData } from "./client.js";

/** AIToolOutput is what a tool's execute returns to the model. */
export interface AIToolOutput {
  /** status is how the call ended: ok, error, denied, rejected, expired, timeout, interrupted, cancelled. */
  status: string;
  /** output is the tool's output (or what went wrong). */
  output: string;
  /** decision is the policy's decision on the call. */
  decision: { action: string; rule: string; reason: string };
}

/** Options of aiTools. */
export interface AIToolsOptions {
  /** only keeps the tools named here (default: every tool the agent may call). */
  only?: string[];
  /** call sets the options of every call (timeout, session, ...). */
  call?: Omit<CallOptions, "id" | "signal">;
  /** tools is the listing to use instead of asking a worker (Client.tools()). */
  tools?: ToolData[];
}

/** emptySchema is the input schema of a tool that names none. */
const emptySchema = { type: "object", properties: {} };

/** output is what the model is told of a result. */
function output(r: Result): AIToolOutput {
  return { status: r.status, output: r.output, decision: { action: r.decision.action, rule: r.decision.rule, reason: r.decision.reason } };
}

/** aiTool is one listed tool as an AI SDK tool calling it through c. */
export function aiTool(c: Client, t: ToolData, opts: AIToolsOptions = {}): Tool<Record<string, unknown>, AIToolOutput> {
  const schema = (t.parameters && typeof t.parameters === "object" ? t.parameters : emptySchema) as Parameters<typeof jsonSchema>[0];
  return tool<Record<string, unknown>, AIToolOutput>({
    description: t.description ?? t.name,
    inputSchema: jsonSchema<Record<string, unknown>>(schema),
    execute: async (input, { abortSignal }) => output(await c.call(t.name, input, { ...opts.call, signal: abortSignal })),
  });
}

/**
 * aiTools returns the tools the client's agent may call (the worker's
 * listing without what its policy denies outright) as AI SDK tools, by
 * name.
 */
export async function aiTools(c: Client, opts: AIToolsOptions = {}): Promise<Record<string, Tool<Record<string, unknown>, AIToolOutput>>> {
  const listing = opts.tools ?? (await c.tools());
  const out: Record<string, Tool<Record<string, unknown>, AIToolOutput>> = {};
  for (const t of [...listing].sort((a, b) => a.name.localeCompare(b.name))) {
    if (opts.only && !opts.only.includes(t.name)) continue;
    out[t.name] = aiTool(c, t, opts);
  }
  return out;
}
