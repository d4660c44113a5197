// The real byollm 0.1.1 daemon, built as the conformance kit's harness
// builds it (a temp home, real config resolution, budgets, spend ledger,
// ingress log and device keys) but with the shipped openai-http backend
// pointed at a model server the test runs, instead of an echo backend.
//
//   node daemon.mjs --origin URL --home DIR --modelUrl URL/v1 --model NAME
//                   [--label L] [--tickMs 100] [--offer private]
//                   [--services JSON] [--defaults JSON]
//
// --tickMs stdin ticks once per line written to stdin instead of on a
// timer, so a test decides when the daemon claims, until a line "run"
// hands the ticks back to a 100 ms timer.
//
// --services replaces the one service ("primary", on --model at --modelUrl)
// with several, [{"name","model","modelUrl"}], each answering llm.generate
// and llm.chat at the --offer scope; --defaults is the config's defaults
// ({"llm.chat": "alpha"}), which the daemon keeps to itself.
//
// Pairs through the device-code flow (prints {"event":"code",userCode}; the
// test approves it), then prints {"event":"paired",...} and ticks until
// stdin closes. Every runner event is printed as {"event":"runner",...}.
import { join } from "node:path";
import { load, emit, fail, flags, sleep } from "./load.mjs";

const args = flags({ label: "byorelay-peer-test", tickMs: "100", offer: "private" });
const named = args.services === undefined
  ? [{ name: "primary", model: args.model, modelUrl: args.modelUrl }]
  : JSON.parse(args.services);
for (const name of ["origin", "home"]) {
  if (args[name] === undefined) fail(`--${name} is required`);
}
for (const service of named) {
  if (!service.model || !service.modelUrl) fail(`service ${service.name}: --model and --modelUrl are required`);
}
const byollm = await load("byollm");

const services = {};
for (const service of named) {
  services[service.name] = {
    model: service.model,
    kinds: ["llm.generate", "llm.chat"],
    type: "openai-http",
    baseUrl: service.modelUrl,
    offer: args.offer,
  };
}
const loaded = byollm.resolveConfig(
  byollm.DaemonConfig.parse({
    services,
    ...(args.defaults === undefined ? {} : { defaults: JSON.parse(args.defaults) }),
    concurrency: 4,
  }),
);
if (loaded.problems?.length > 0) fail(`config: ${JSON.stringify(loaded.problems)}`);

const budgets = new byollm.Budgets(join(args.home, "budgets.json"), loaded.config.community);
await budgets.load(Date.now());
const spend = new byollm.SpendLedger(join(args.home, "spend.json"));
await spend.load(Date.now());
const ingress = new byollm.IngressLog({
  path: join(args.home, "ingress.log"),
  communityPromptDays: 7,
  keepSelfPrompts: true,
});
const device = new byollm.DeviceIdentity(join(args.home, "keys.json"));

// What the daemon advertises, derived from the resolved routes exactly as
// the kit's harness does (detectCapabilities would probe the backend first;
// pairing only needs the declared matrix).
const capabilities = loaded.routes.map((route) => ({
  kind: route.kind,
  service: route.service,
  backendId: route.backendId,
  backendClass: route.backendClass,
  model: route.model,
  offerScope: route.offerScope,
}));

// Closing stdin stops the daemon at any point, releasing what it holds.
let runner;
let stopping = false;
let manual = args.tickMs === "stdin";
let asked = 0;
let wake = () => {};
process.stdin.resume();
process.stdin.on("data", (chunk) => {
  for (const line of chunk.toString().split("\n").slice(0, -1)) {
    // "run" hands the ticks back to the timer (every 100 ms).
    if (line === "run") manual = false;
    else asked++;
  }
  wake();
});
process.stdin.on("end", async () => {
  stopping = true;
  await runner?.shutdown("shutdown");
  process.exit(0);
});

// nextTick waits for the next tick: the timer's, or a line on stdin.
async function nextTick() {
  if (!manual) return sleep(args.tickMs === "stdin" ? 100 : Number(args.tickMs));
  while (manual && asked === 0) await new Promise((resolve) => (wake = resolve));
  if (manual) asked--;
}

const paired = await byollm.connect({
  client: new byollm.ProtocolClient({ origin: args.origin }),
  daemonVersion: byollm.DAEMON_VERSION,
  device: await device.publicIdentity(Date.now()),
  label: args.label,
  capabilities,
  onCode: (info) => emit("code", info),
  // The relay asks for a 2 s poll interval; a test need not wait that long.
  sleep: (ms) => sleep(Math.min(ms, 50)),
});
if (!paired.ok) fail(`pairing ${paired.reason}: ${paired.message}`);
const pairing = paired.pairing;
emit("paired", {
  runnerId: pairing.runnerId,
  owner: pairing.owner,
  sites: Object.keys(pairing.sites),
  controlPlanePublic: pairing.controlPlanePublic !== undefined,
});

runner = new byollm.Runner({
  client: new byollm.ProtocolClient({
    origin: args.origin,
    identity: { runnerId: pairing.runnerId, sign: (input) => device.signRequest(input) },
  }),
  runnerId: pairing.runnerId,
  owner: pairing.owner,
  // Decides the regime: with the key every job needs a grant signed by it;
  // without it the daemon runs its owner's jobs only (direct mode).
  controlPlanePublic: pairing.controlPlanePublic,
  identity: {
    keys: () => device.load(Date.now()),
    sites: new Map(Object.entries(pairing.sites)),
    known: new Map(Object.entries(pairing.known ?? pairing.sites)),
  },
  daemonVersion: byollm.DAEMON_VERSION,
  loaded,
  budgets,
  spend,
  ingress,
  // Heartbeats fire every tick; everything else is worth a line.
  onEvent: (event) => {
    if (event.type !== "heartbeat") emit("runner", event);
  },
});

if (manual) await nextTick();
while (!stopping) {
  try {
    // Printed so a test can wait for whole ticks (each a heartbeat and a
    // claim) instead of sleeping.
    emit("tick", { claimed: await runner.tick() });
  } catch (error) {
    emit("tick-error", { message: error instanceof Error ? error.message : String(error) });
  }
  await nextTick();
}
