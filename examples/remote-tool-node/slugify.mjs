// Serves the tool "slugify" to a toolgate fleet as a NATS micro service,
// in JavaScript: workers discover it from the endpoint metadata and route
// calls to it. It connects with the credentials of a tool service named
// slugify (toolctl creds tool slugify --out slugify.creds), from
// NATS_CREDS or --creds FILE. Run:
//   npm ci && NATS_CREDS=slugify.creds node slugify.mjs nats://127.0.0.1:4222
import { readFileSync } from "node:fs";
import { connect, credsAuthenticator } from "@nats-io/transport-node";
import { Svcm } from "@nats-io/services";

const args = process.argv.slice(2);
let credsFile = process.env.NATS_CREDS ?? "";
const at = args.indexOf("--creds");
if (at >= 0) {
  credsFile = args[at + 1] ?? "";
  args.splice(at, 2);
}
const opts = { servers: args[0] ?? "nats://127.0.0.1:4222", name: "remote-tool-node" };
if (credsFile !== "") {
  opts.authenticator = credsAuthenticator(readFileSync(credsFile));
}
const nc = await connect(opts);
const svc = await new Svcm(nc).add({ name: "toolgate-slugify", version: "0.1.0", description: "Turn a title into a URL slug." });

const metadata = {
  "toolgate.tool": "slugify",
  "toolgate.description": "Turn a title into a lowercase URL slug.",
  "toolgate.schema": JSON.stringify({
    type: "object",
    properties: { title: { type: "string", minLength: 1 } },
    required: ["title"],
    additionalProperties: false,
  }),
  "toolgate.kind": "read",
};

svc.addEndpoint("slugify", {
  subject: "toolgate.remote.slugify",
  metadata,
  handler: (err, msg) => {
    if (err) return;
    // Workers confirm the announced definition on this subject: only
    // slugify's credentials may listen here.
    if (msg.headers?.has("Toolgate-Describe")) {
      msg.respond(JSON.stringify(metadata));
      return;
    }
    // The worker validated the arguments against the schema above; the
    // call id and the agent are in the headers.
    const { title } = msg.json();
    const slug = title.toLowerCase().normalize("NFKD").replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "");
    const agent = msg.headers?.get("Toolgate-Agent") ?? "";
    msg.respond(JSON.stringify({ content: slug, metadata: { agent } }));
  },
});

console.error("serving slugify");
process.on("SIGTERM", async () => { await svc.stop(); await nc.close(); });
await nc.closed();
