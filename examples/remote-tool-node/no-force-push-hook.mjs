// A toolgate tool hook in JavaScript: before any bash call runs, it
// refuses `git push --force` (and -f, --force-with-lease stays allowed)
// and lets everything else pass. Workers ask it over NATS request/reply
// on toolgate.hook.no_force_push when their hooks file lists it:
//   before:
//     - name: no_force_push
//       subject: toolgate.hook.no_force_push
//       tools: [bash]
// It connects with the credentials of a hook service named no_force_push
// (toolctl creds hook no_force_push --out no_force_push.creds), from
// NATS_CREDS or --creds FILE. Run:
//   npm ci && NATS_CREDS=no_force_push.creds node no-force-push-hook.mjs nats://127.0.0.1:4222
import { readFileSync } from "node:fs";
import { connect, credsAuthenticator } from "@nats-io/transport-node";

const args = process.argv.slice(2);
let credsFile = process.env.NATS_CREDS ?? "";
const at = args.indexOf("--creds");
if (at >= 0) {
  credsFile = args[at + 1] ?? "";
  args.splice(at, 2);
}
const opts = { servers: args[0] ?? "nats://127.0.0.1:4222", name: "no-force-push-hook" };
if (credsFile !== "") {
  opts.authenticator = credsAuthenticator(readFileSync(credsFile));
}
const nc = await connect(opts);
const subject = "toolgate.hook.no_force_push";

// The request and response formats: docs/TOOL_HOOKS.md.
const sub = nc.subscribe(subject, { queue: subject });
await nc.flush(); // the server has the subscription: workers reach it now
console.error("serving " + subject);
process.on("SIGTERM", async () => { await nc.drain(); });
for await (const msg of sub) {
  let resp = { action: "pass" };
  try {
    const req = msg.json();
    const command = req.stage === "before" ? String(req.arguments?.command ?? "") : "";
    if (/\bgit\s+push\b/.test(command) && /(\s--force(\s|$)|\s-f(\s|$))/.test(command)) {
      resp = { action: "deny", reason: "force pushes need a ticket (asked by " + req.agent + ")" };
    }
  } catch (e) {
    resp = { action: "error", reason: String(e) };
  }
  msg.respond(JSON.stringify(resp));
}
