// Serves the tool "slugify" to a toolgate fleet as a NATS micro service,
// in JavaScript: workers discover it from the endpoint metadata and route
// calls to it. Run: npm ci && node slugify.mjs nats://127.0.0.1:4222
import { connect } from "@nats-io/transport-node";
import { Svcm } from "@nats-io/services";

const nc = await connect({ servers: process.argv[2] ?? "nats://127.0.0.1:4222", name: "remote-tool-node" });
const svc = await new Svcm(nc).add({ name: "toolgate-slugify", version: "0.1.0", description: "Turn a title into a URL slug." });

svc.addEndpoint("slugify", {
  subject: "toolgate.remote.slugify",
  metadata: {
    "toolgate.tool": "slugify",
    "toolgate.description": "Turn a title into a lowercase URL slug.",
    "toolgate.schema": JSON.stringify({
      type: "object",
      properties: { title: { type: "string", minLength: 1 } },
      required: ["title"],
      additionalProperties: false,
    }),
    "toolgate.kind": "read",
  },
  handler: (err, msg) => {
    if (err) return;
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
