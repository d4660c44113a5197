// A @byollm/conformance 0.1.1 target for a Go direct-lane server over real
// HTTP. It imports nothing: the daemon
// endpoints are at BYORELAY_SITE_ORIGIN, and every setup hook is a JSON POST
// to the server's test-only admin listener at BYORELAY_SITE_ADMIN (loopback).
const origin = process.env.BYORELAY_SITE_ORIGIN;
const admin = process.env.BYORELAY_SITE_ADMIN;
const name = process.env.BYORELAY_SITE_NAME ?? "byorelay direct lane";
const leaseMs = Number(process.env.BYORELAY_SITE_LEASE_MS);
const ttlMs = Number(process.env.BYORELAY_SITE_TTL_MS);
if (!origin || !admin || !leaseMs || !ttlMs) {
  throw new Error("BYORELAY_SITE_ORIGIN, _ADMIN, _LEASE_MS and _TTL_MS must be set");
}

async function call(path, body, { allow404 = false } = {}) {
  const res = await fetch(`${admin}/admin/${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body ?? {}),
  });
  const text = await res.text();
  if (allow404 && res.status === 404) return null;
  if (res.status !== 200) {
    // Thrown so a refused enqueue or approval fails the hook, as the kit
    // expects (C020, C022).
    throw new Error(`admin ${path}: ${res.status} ${text}`);
  }
  return JSON.parse(text);
}

export default {
  name,
  origin,
  leaseMs,
  ttlMs,
  fetch: (request) => fetch(request),
  reset: () => call("reset"),
  enqueue: (input) => call("enqueue", input),
  approvePairing: async (userCode, owner) => {
    await call("pairings/approve", { userCode, owner });
  },
  revokeRunner: async (runnerId) => {
    await call("runners/revoke", { runnerId });
  },
  cancelJob: async (jobId) => {
    await call("jobs/cancel", { jobId });
  },
  job: (jobId) => call("jobs/get", { jobId }, { allow404: true }),
  runnerAvailability: (input) => call("availability", input),
  sweep: async () => {
    await call("sweep");
  },
  advanceTime: async (ms) => {
    await call("clock/advance", { ms: Math.ceil(ms) });
  },
};
