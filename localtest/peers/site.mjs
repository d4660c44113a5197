// The real @byollm/server 0.1.1 site on its relay lane: ByollmApp with
// lane {relayOrigin, siteId} over the reference MemoryStore. It enqueues
// one job (published to the relay as a stub; the payload stays here, sealed
// at rest), then pumps: seal to whichever device claimed it, collect the
// sealed result, open and verify it, complete it in its own store.
//
//   BYOLLM_SITE_KEYS=<base64 StoredKeys JSON> node site.mjs --relay URL
//       --siteId ID --owner OWNER --prompt TEXT [--pumpMs 100] [--timeoutMs 20000]
//
// Prints {"event":"enqueued",jobId,audience,sizeClass}, one {"event":"pump",...} per
// cycle that did something, and {"event":"result",...} with the job's
// terminal state, outcome and provenance; exits 0 then, or when stdin
// closes.
import { load, emit, fail, flags, sleep } from "./load.mjs";

const args = flags({ pumpMs: "100", timeoutMs: "20000" });
for (const name of ["relay", "siteId", "owner", "prompt"]) {
  if (args[name] === undefined) fail(`--${name} is required`);
}
const server = await load("@byollm/server");

const app = new server.ByollmApp({
  store: new server.MemoryStore(),
  siteKeys: server.siteKeysFromEnv("BYOLLM_SITE_KEYS"),
  lane: { relayOrigin: args.relay, siteId: args.siteId },
});

const job = await app.enqueue({
  kind: "llm.generate",
  payload: { prompt: args.prompt },
  owner: args.owner,
});
emit("enqueued", {
  jobId: job.id,
  audience: job.record.audience,
  sizeClass: job.record.sizeClass,
});

// The test closes stdin to stop it early (a failed test, or cleanup).
process.stdin.resume();
process.stdin.on("end", () => process.exit(0));

const deadline = Date.now() + Number(args.timeoutMs);
for (;;) {
  const report = await app.cloud.pump();
  if (report.sealed.length + report.completed.length + report.refused.length > 0 || report.deferred) {
    emit("pump", report);
  }
  const result = await app.result(job.id);
  if (result !== null && ["ok", "error", "canceled", "expired"].includes(result.state)) {
    emit("result", result);
    process.exit(0);
  }
  if (Date.now() > deadline) fail(`job ${job.id} still ${result?.state} after ${args.timeoutMs}ms`);
  await sleep(Number(args.pumpMs));
}
