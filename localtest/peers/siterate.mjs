// The real @byollm/server 0.1.1 site on its relay lane at a sustained
// rate: ByollmApp with lane {relayOrigin, siteId} over the reference
// MemoryStore, publishing --rate jobs a second for --runMs, each for one of
// --owners in turn with a deadline --deadlineMs from its publish, while it
// pumps (seal what was claimed, collect and complete what finished) every
// --pumpMs, start to start, as a long-lived site on an interval does.
//
//   BYOLLM_SITE_KEYS=<base64 StoredKeys JSON> node siterate.mjs --relay URL
//       --siteId ID --owners A,B,... [--rate 300] [--runMs 10000]
//       [--deadlineMs 60000] [--pumpMs 250]
//
// Prints {"event":"progress",...} once a second and, once every job is
// completed or past its deadline, {"event":"done",enqueued,completed,
// completedInRun,late,missing,firstEnqueuedAt,lastCompletedAt,
// maxLatencyMs,maxPumpMs,maxCompleted,pumpErrors} and exits 0
// (completedInRun: those completed before publishing ended; late: the ids
// completed after their deadline; missing: the ids never completed). It
// exits when stdin closes.
import { load, emit, fail, flags, sleep } from "./load.mjs";

const args = flags({ rate: "300", runMs: "10000", deadlineMs: "60000", pumpMs: "250" });
for (const name of ["relay", "siteId", "owners"]) {
  if (args[name] === undefined) fail(`--${name} is required`);
}
const server = await load("@byollm/server");

const app = new server.ByollmApp({
  store: new server.MemoryStore(),
  siteKeys: server.siteKeysFromEnv("BYOLLM_SITE_KEYS"),
  lane: { relayOrigin: args.relay, siteId: args.siteId },
});

process.stdin.resume();
process.stdin.on("end", () => process.exit(0));

const owners = args.owners.split(",");
const rate = Number(args.rate);
const runMs = Number(args.runMs);
const deadlineMs = Number(args.deadlineMs);
const pumpMs = Number(args.pumpMs);

const deadlines = new Map(); // job id → its deadline (ms)
const publishedAt = new Map();
const completedAt = new Map();
let enqueued = 0;
let publishing = true;
let failure = null;

// Publishes in ticks of 50 ms, each tick's jobs at once, so the rate holds
// while a pump is under way.
async function publish() {
  const start = Date.now();
  let next = 0;
  while (Date.now() - start < runMs && failure === null) {
    const due = Math.floor(((Date.now() - start) / 1000) * rate);
    const batch = [];
    for (; next < due; next++) {
      const owner = owners[next % owners.length];
      const deadlineAt = Date.now() + deadlineMs;
      batch.push(
        app.enqueue({ kind: "llm.generate", payload: { prompt: `rate #${next}` }, owner, deadlineAt }).then((job) => {
          deadlines.set(job.id, deadlineAt);
          publishedAt.set(job.id, Date.now());
          enqueued++;
        }),
      );
    }
    try {
      await Promise.all(batch);
    } catch (error) {
      failure = `enqueue: ${error.message}`;
    }
    await sleep(50);
  }
  publishing = false;
}

let maxPumpMs = 0;
let maxCompleted = 0; // the most results one pump completed
let pumpErrors = 0;
async function pump() {
  for (;;) {
    const started = Date.now();
    // A cycle that throws (a seal for a grant that lapsed meanwhile) is
    // logged and the next goes on, as a site on an interval does.
    let report = { completed: [] };
    try {
      report = await app.cloud.pump();
    } catch (error) {
      pumpErrors++;
      emit("pump-error", { message: error.message });
    }
    const now = Date.now();
    maxPumpMs = Math.max(maxPumpMs, now - started);
    maxCompleted = Math.max(maxCompleted, report.completed.length);
    for (const id of report.completed) {
      if (!completedAt.has(id)) completedAt.set(id, now);
    }
    const open = [...deadlines.keys()].filter((id) => !completedAt.has(id) && deadlines.get(id) > now);
    if (!publishing && open.length === 0) return;
    await sleep(Math.max(0, pumpMs - (Date.now() - started)));
  }
}

const progress = setInterval(() => {
  emit("progress", { enqueued, completed: completedAt.size, maxPumpMs, pumpErrors });
}, 1000);
await Promise.all([publish(), pump()]);
clearInterval(progress);
if (failure !== null) fail(failure);

const late = [];
let maxLatencyMs = 0;
let lastCompletedAt = 0;
for (const [id, at] of completedAt) {
  if (at > deadlines.get(id)) late.push(id);
  maxLatencyMs = Math.max(maxLatencyMs, at - publishedAt.get(id));
  lastCompletedAt = Math.max(lastCompletedAt, at);
}
const firstEnqueuedAt = Math.min(...publishedAt.values());
// Completed while the site was still publishing: a site that keeps up
// completes nearly all of them by then; one that falls behind leaves a
// backlog that grows with the run.
let completedInRun = 0;
for (const at of completedAt.values()) {
  if (at <= firstEnqueuedAt + runMs) completedInRun++;
}
emit("done", {
  enqueued,
  completed: completedAt.size,
  completedInRun,
  late,
  missing: [...deadlines.keys()].filter((id) => !completedAt.has(id)),
  firstEnqueuedAt,
  lastCompletedAt,
  maxLatencyMs,
  maxPumpMs,
  maxCompleted,
  pumpErrors,
});
process.exit(0);
