// The reference Projection (the one @byollm/relay 0.1.1 ships) answering the
// questions projection/reference_test.go asks of this package, so the two
// can be compared. Usage: node reference.mjs <node_modules dir>, input JSON
// on stdin, output JSON on stdout.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const R = await import(pathToFileURL(join(process.argv[2], "@byollm", "relay", "dist", "index.js")).href);

let raw = "";
for await (const chunk of process.stdin) raw += chunk;
const input = JSON.parse(raw);

const parses = input.parse.map((text) => {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    return false;
  }
  return R.RelayFixtureSchema.safeParse(value).success;
});

const p = new R.Projection(input.fixture);
const orNull = (v) => (v === null ? null : v);
const answers = {
  sitesFor: input.owners.map((o) => p.sitesFor(o).map((s) => s.siteId)),
  routesFor: input.owners.map((o) => [...p.routesFor(o)]),
  ownersRunnableBy: input.owners.map((o) => p.ownersRunnableBy(o)),
  mayRunFor: input.owners.map((a) => input.owners.map((b) => p.mayRunFor(a, b))),
  consentFor: input.pairs.map(([o, s]) => orNull(p.consentFor(o, s))),
  mayRouteFor: input.pairs.map(([o, s]) => p.mayRouteFor(o, s)),
  pausedFor: input.pairs.map(([o, s]) => p.pausedFor(o, s)),
  deviceFor: input.runners.map((r) => p.deviceFor(r)?.owner ?? null),
  revokedDevice: input.runners.map((r) => p.revokedDevice(r)),
  deviceByFingerprint: input.identities.map((i) => p.deviceByFingerprint(i)?.runnerId ?? null),
  siteIdForKey: input.keyIds.map((k) => p.siteIdForKey(k)),
  siteFor: input.sites.map((s) => p.siteFor(s)?.site.identity ?? null),
};
process.stdout.write(JSON.stringify({ parses, answers }));
