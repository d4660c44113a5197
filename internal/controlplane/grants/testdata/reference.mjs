// The reference control plane (the ControlPlane engine @byollm/control-plane
// 0.1.1 ships, over its MemoryPolicyStore) deciding the rows law_test.go
// runs through this package's author, so the two can be compared. Usage:
// node reference.mjs <node_modules dir>, input JSON on stdin, output JSON
// on stdout: one { granted } or { declined } per row, in order.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const CP = await import(pathToFileURL(join(process.argv[2], "@byollm", "control-plane", "dist", "index.js")).href);

let raw = "";
for await (const chunk of process.stdin) raw += chunk;
const input = JSON.parse(raw);

const signer = CP.keypairSigner(input.keys);

const outcomes = [];
for (const row of input.rows) {
  const store = new CP.MemoryPolicyStore();
  for (const c of row.consents ?? []) {
    store.consent({
      siteId: c.siteId,
      user: c.user,
      mappings: (c.mappings ?? []).map((m) => ({ ...m, owner: m.owner || null })),
    });
    if (c.paused) store.pause({ siteId: c.siteId, user: c.user });
    if (c.revoked) store.revoke({ siteId: c.siteId, user: c.user });
  }
  for (const m of row.members ?? []) {
    store.addMember({ owner: m.owner, user: m.user });
    if (m.removed) store.removeMember({ owner: m.owner, user: m.user });
  }
  // A store that cannot answer: the engine must decline, never refuse.
  const policy = row.storeFails
    ? { read: () => Promise.reject(new Error("policy store unavailable")) }
    : store;
  const engine = new CP.ControlPlane({
    store: policy,
    signer,
    now: () => input.now,
    newGrantId: () => row.grantId,
  });
  outcomes.push(
    await engine.authorGrant({
      job: row.job,
      siteId: row.siteId,
      siteKey: row.siteKey,
      owner: row.owner,
      ...(row.purpose ? { purpose: row.purpose } : {}),
      capabilities: row.capabilities,
    }),
  );
}
process.stdout.write(JSON.stringify(outcomes));
