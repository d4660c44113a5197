// The reference relay, @byollm/relay 0.1.1, served over HTTP on loopback,
// with an admin listener that answers the same routes byorelay's admin API
// does (the subset the peer tests use), so one Go harness drives both.
// It proves the peer scripts against the behaviour byorelay copies.
//
//   node ref-relay.mjs [--controlPlane on]
// prints {"event":"listening","origin":...}; stops on stdin close.
import { createServer } from "node:http";
import { randomUUID } from "node:crypto";
import { load, emit, flags } from "./load.mjs";

const args = flags({ controlPlane: "off" });
const relayPkg = await load("@byollm/relay");
const protocol = await load("@byollm/protocol");

const fixture = { sites: [], consents: [], devices: [], rosters: [], revoked: [] };
const codes = new relayPkg.MemoryPairingCodes();

// With a control plane, the relay hands daemons its grant-signing key at
// pairing and every claimed job must carry a grant signed by it.
let grants = {};
if (args.controlPlane === "on") {
  const cp = protocol.generateKeys(Date.now());
  grants = {
    controlPlanePublic: cp.identityPublic,
    authorGrant: async (input) => ({ granted: grantFor(cp, input) }),
  };
}

function grantFor(cp, input) {
  const job = input.job;
  return protocol.signGrant(cp, {
    grantId: randomUUID(),
    jobId: job.id,
    site: job.site,
    user: job.owner,
    owner: input.owner,
    purpose: input.purpose ?? protocol.RESERVED_PURPOSE,
    kind: job.kind,
    service: input.capabilities.find((c) => c.kind === job.kind)?.service ?? "primary",
    issuedAt: Date.now(),
  });
}

const relay = new relayPkg.Relay({
  fixture,
  pairingCodes: codes,
  verificationUrl: "http://127.0.0.1/approve",
  ...grants,
});

const admin = {
  "POST /admin/sites": (b) => {
    const site = { siteId: b.siteId, site: b.site };
    fixture.sites.push(site);
    return { version: 1, site };
  },
  "POST /admin/consents": (b) => {
    fixture.consents.push({ owner: b.owner, siteId: b.siteId, paused: false });
    return { version: 1, consent: { owner: b.owner, siteId: b.siteId, paused: false, revoked: false } };
  },
  "POST /admin/pairings/approve": async (b) => {
    const pending = await codes.byUserCode(b.userCode);
    if (pending === undefined) throw Object.assign(new Error("no such pairing code"), { status: 404 });
    const device = { owner: b.owner, runnerId: b.runnerId ?? `runner_${randomUUID()}`, device: pending.device };
    fixture.devices.push(device);
    return { version: 1, device, label: pending.label, platform: pending.platform };
  },
};

const server = createServer(async (req, res) => {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const body = Buffer.concat(chunks);
  const path = new URL(req.url, "http://x").pathname;
  if (path.startsWith("/admin")) {
    const route = admin[`${req.method} ${path}`];
    let status = 200;
    let answer;
    try {
      if (route === undefined) throw Object.assign(new Error(`no admin route ${path}`), { status: 404 });
      answer = await route(JSON.parse(body.toString("utf8")));
      relay.project(fixture);
    } catch (error) {
      status = error.status ?? 400;
      answer = { error: status === 404 ? "not-found" : "bad-request", message: error.message };
    }
    res.writeHead(status, { "content-type": "application/json" });
    res.end(JSON.stringify(answer));
    return;
  }
  const request = new Request(`http://127.0.0.1${req.url}`, {
    method: req.method,
    headers: req.headers,
    ...(req.method === "GET" || req.method === "HEAD" ? {} : { body }),
  });
  const response = await relay.handle(request);
  const headers = Object.fromEntries(response.headers.entries());
  res.writeHead(response.status, headers);
  res.end(Buffer.from(await response.arrayBuffer()));
});

server.listen(0, "127.0.0.1", () => {
  emit("listening", { origin: `http://127.0.0.1:${server.address().port}` });
});
process.stdin.resume();
process.stdin.on("end", () => process.exit(0));
