// The reference relay (@byollm/relay 0.1.1) driven one operation at a time
// by relay/reference_test.go, so the Go relay and the reference answer the
// same signed requests and their answers can be compared byte for byte.
//
// Usage: node reference.mjs <node_modules dir>
// stdin: one JSON operation per line; stdout: one JSON answer per line.
//   {"op":"init","fixture":{...},"config":{...},"now":<ms>}
//   {"op":"advance","ms":<n>}
//   {"op":"project","fixture":{...}}
//   {"op":"dropPresence","runnerId":"..."}
//   {"op":"request","method","path","query","headers":{...},"body":"..."}
import { createInterface } from "node:readline";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.argv[2];
const R = await import(pathToFileURL(join(modules, "@byollm", "relay", "dist", "index.js")).href);
const P = await import(pathToFileURL(join(modules, "@byollm", "protocol", "dist", "index.js")).href);
await P.cryptoReady?.();

let clock = 0;
let relay;

// The same deterministic control plane the Go side configures: the job id
// says what the grant author answers, the purpose what satisfiable answers.
const authorGrant = ({ job, siteKey, owner }) => {
  if (job.id.includes("decline-permanent")) return { declined: { permanent: true, reason: "removed" } };
  if (job.id.includes("decline")) return { declined: { permanent: false, reason: "elsewhere" } };
  return {
    granted: {
      grantId: "g-" + job.id, jobId: job.id, site: siteKey, user: job.owner, owner,
      purpose: job.purpose ?? "none", kind: job.kind, service: "local", issuedAt: 1, signature: "sig",
    },
  };
};
const satisfiable = async ({ purpose }) => {
  if (purpose === "throws") throw new Error("policy store down");
  if (purpose === "undeclared") return { verdict: "not-declared" };
  if (purpose === "unmapped") return { verdict: "unmapped" };
  if (purpose === "waiting") return { verdict: "waiting" };
  return { verdict: "ok" };
};

async function handle(op) {
  switch (op.op) {
    case "init": {
      clock = op.now;
      const c = op.config;
      relay = new R.Relay({
        fixture: op.fixture,
        now: () => clock,
        ...(c.leaseMs ? { leaseMs: c.leaseMs } : {}),
        ...(c.verificationUrl ? { verificationUrl: c.verificationUrl } : {}),
        ...(c.debug ? { debug: true } : {}),
        ...(c.updateOffer ? { updateOffer: c.updateOffer } : {}),
        ...(c.daemonFloor ? { daemonFloor: c.daemonFloor } : {}),
        ...(c.controlPlanePublic ? { controlPlanePublic: c.controlPlanePublic } : {}),
        ...(c.grants ? { authorGrant } : {}),
        ...(c.satisfiable ? { satisfiable } : {}),
      });
      return {};
    }
    case "advance":
      clock += op.ms;
      return {};
    case "dropPresence":
      await relay.state.dropPresenceForTests(op.runnerId);
      return {};
    case "project":
      relay.project(op.fixture);
      return {};
    case "request": {
      const url = "http://relay.test" + op.path + (op.query ? "?" + op.query : "");
      const init = { method: op.method, headers: op.headers };
      if (op.method !== "GET" && op.method !== "HEAD") init.body = op.body;
      const res = await relay.handle(new Request(url, init));
      return { status: res.status, contentType: res.headers.get("content-type"), body: await res.text() };
    }
  }
  throw new Error("unknown op " + op.op);
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  let answer;
  try {
    answer = await handle(JSON.parse(line));
  } catch (err) {
    answer = { thrown: String(err?.message ?? err) };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
}
