// The real @byollm/server 0.1.1 site on its relay lane: ByollmApp with
// lane {relayOrigin, siteId} over the reference MemoryStore. It enqueues
// --count jobs (each published to the relay as a stub; the payload stays
// here, sealed at rest), then pumps: seal to whichever device claimed each,
// collect the sealed results, open and verify them, complete them in its
// own store.
//
//   BYOLLM_SITE_KEYS=<base64 StoredKeys JSON> node site.mjs --relay URL
//       --siteId ID --owner OWNER --prompt TEXT [--count 1] [--purpose P]
//       [--pumpMs 100] [--timeoutMs 20000]
//
// With --count above 1, job i's prompt is "TEXT #i" (i from 1). Prints
// {"event":"enqueued",jobId,prompt,audience,sizeClass} per job, or
// {"event":"refused",prompt,error,code,retryable,message} for a job the
// relay would not take (the error class the server's own client threw:
// EnqueueRefused for a 409 refusal, RelayUnavailable otherwise), one
// {"event":"pump",...} per cycle that did something, and one
// {"event":"result",...} per job as it ends, with its terminal state,
// outcome and provenance; exits 0 once every job has ended, or when stdin
// closes.
import { load, emit, fail, flags, sleep } from "./load.mjs";

const args = flags({ count: "1", pumpMs: "100", timeoutMs: "20000" });
for (const name of ["relay", "siteId", "owner", "prompt"]) {
  if (args[name] === undefined) fail(`--${name} is required`);
}
const server = await load("@byollm/server");

const app = new server.ByollmApp({
  store: new server.MemoryStore(),
  siteKeys: server.siteKeysFromEnv("BYOLLM_SITE_KEYS"),
  lane: { relayOrigin: args.relay, siteId: args.siteId },
});

const count = Number(args.count);
const jobs = [];
for (let i = 1; i <= count; i++) {
  const prompt = count === 1 ? args.prompt : `${args.prompt} #${i}`;
  let job;
  try {
    job = await app.enqueue({
      kind: "llm.generate",
      payload: { prompt },
      owner: args.owner,
      ...(args.purpose === undefined ? {} : { purpose: args.purpose }),
    });
  } catch (error) {
    if (!(error instanceof server.EnqueueRefused) && !(error instanceof server.RelayUnavailable)) throw error;
    emit("refused", {
      prompt,
      error: error.name,
      code: error.code,
      retryable: error.retryable ?? false,
      message: error.message,
    });
    continue;
  }
  jobs.push(job.id);
  emit("enqueued", {
    jobId: job.id,
    prompt,
    audience: job.record.audience,
    sizeClass: job.record.sizeClass,
  });
}

// The test closes stdin to stop it early (a failed test, or cleanup).
process.stdin.resume();
process.stdin.on("end", () => process.exit(0));

const deadline = Date.now() + Number(args.timeoutMs);
const open = new Set(jobs);
for (;;) {
  const report = await app.cloud.pump();
  if (report.sealed.length + report.completed.length + report.refused.length > 0 || report.deferred) {
    emit("pump", report);
  }
  for (const id of [...open]) {
    const result = await app.result(id);
    if (result !== null && ["ok", "error", "canceled", "expired"].includes(result.state)) {
      emit("result", result);
      open.delete(id);
    }
  }
  if (open.size === 0) process.exit(0);
  if (Date.now() > deadline) fail(`jobs ${[...open].join(", ")} still open after ${args.timeoutMs}ms`);
  await sleep(Number(args.pumpMs));
}
