// Parses bodies with the real @byollm/protocol zod schemas and prints what
// the reference would write, so Go's bytes can be compared with them.
//
// Usage: node encode.mjs <node_modules dir> < cases.json
// Input:  [{"schema": "JobStub", "body": "<raw JSON text>"}, ...]
//         or {"fn": "checkProtocolVersion", "body": "<raw JSON text>"}
//         or {"fn": "vocab", "body": "null"} for the closed vocabularies
// Output: [{"ok": true, "json": "<JSON.stringify of the parsed value>"}
//          | {"ok": false, "why": "..."}, ...]
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.argv[2];
if (!modules) {
  console.error("usage: node encode.mjs <node_modules dir>");
  process.exit(2);
}
const pkgDir = join(modules, "@byollm", "protocol");
const pkg = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8"));
const P = await import(pathToFileURL(join(pkgDir, pkg.exports["."].import)).href);

const cases = JSON.parse(readFileSync(0, "utf8"));
const out = cases.map((c) => {
  let value;
  try {
    value = JSON.parse(c.body);
  } catch (e) {
    return { ok: false, why: "JSON.parse: " + e.message };
  }
  if (c.fn === "vocab") {
    return {
      ok: true,
      json: JSON.stringify({
        JobKinds: P.JobKind.options,
        SizeClasses: P.SizeClass.options,
        Audiences: P.Audience.options,
        OfferScopes: P.OfferScope.options,
        BackendClasses: P.BackendClass.options,
        BackendIDs: P.BackendIdSchema.options,
        BackendClassOf: Object.fromEntries(Object.entries(P.BACKENDS).map(([id, d]) => [id, d.class])),
        ReleaseReasons: P.ReleaseRequest.shape.reason.options,
        ResultDispositions: P.ResultDisposition.options,
        EnvelopeDirections: P.EnvelopeDirection.options,
        Platforms: P.PairStartRequest.shape.daemon.shape.platform.options,
        JobStates: P.JobState.options,
        WireErrorCodes: P.WireErrorCode.options,
        ErrorStatus: P.ERROR_STATUS,
        MaxEnvelopeBytes: P.MAX_ENVELOPE_BYTES,
        MaxClockSkewMs: P.MAX_CLOCK_SKEW_MS,
        MaxSuccessionChain: P.MAX_SUCCESSION_CHAIN,
        ProtocolVersion: P.PROTOCOL_VERSION,
        SupportedProtocolVersions: P.SUPPORTED_PROTOCOL_VERSIONS,
        MinProtocolVersion: P.MIN_PROTOCOL_VERSION,
        UpgradeCommand: P.UPGRADE_COMMAND,
        UpdateOfferSince: P.UPDATE_OFFER_SINCE,
      }),
    };
  }
  if (c.fn === "checkProtocolVersion") {
    return { ok: true, json: JSON.stringify(P.checkProtocolVersion(value)) };
  }
  const schema = P[c.schema];
  if (!schema || typeof schema.safeParse !== "function") {
    return { ok: false, why: "no such schema: " + c.schema, missing: true };
  }
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    return { ok: false, why: parsed.error.issues.map((i) => i.path.join(".") + ": " + i.message).join("; ") };
  }
  return { ok: true, json: JSON.stringify(parsed.data) };
});
process.stdout.write(JSON.stringify(out));
