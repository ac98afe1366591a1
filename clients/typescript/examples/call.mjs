// Calls a tool through a toolgate fleet as an agent and prints the
// verified result: its status, the policy's decision and the output,
// with the output streamed as progress while the tool runs.
//
//   toolctl creds agent agent-7                    # prints the .creds file's path
//   NATS_URL=nats://127.0.0.1:4222 TOOLGATE_CREDS=<that path> \
//     node examples/call.mjs read '{"path":"README.md","limit":3}'
//
// (In an agent's own project, import from "@toolgate/client" instead.)
import { connect } from "../dist/index.js";

const [tool = "read", args = '{"path":"README.md","limit":3}'] = process.argv.slice(2);

const c = await connect({
  servers: process.env.NATS_URL ?? "nats://127.0.0.1:4222",
  creds: process.env.TOOLGATE_CREDS,
});
try {
  const call = await c.start(tool, JSON.parse(args), {
    timeout: 10 * 60_000,
    onPending: (r) => console.error(`call ${r.callId} is parked: ${r.decision.reason} (approve it: toolctl approvals approve ${r.callId})`),
  });
  for await (const p of call.progress()) {
    process.stderr.write(p.chunk);
  }
  const r = await call.result;
  console.log(`status: ${r.status}`);
  console.log(`decision: ${r.decision.action} (rule ${r.decision.rule || "-"}): ${r.decision.reason}`);
  console.log(r.output);
  process.exitCode = r.status === "ok" ? 0 : 1;
} finally {
  await c.close();
}
