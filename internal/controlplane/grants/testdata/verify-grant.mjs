// Verifies grants with the real @byollm/protocol 0.1.1, for kms_test.go.
// Usage: node verify-grant.mjs <node_modules dir>
// stdin: {"controlPlanePublic": "...", "now": ms, "grants": [SignedGrant, ...]}
// stdout: for each grant, the reference's verdict (null when accepted), the
// statement bytes it rebuilds (UTF-8), and its verdict on the same grant
// with one signed field changed, which must be "bad-signature".
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const P = await import(pathToFileURL(join(process.argv[2], "@byollm", "protocol", "dist", "index.js")).href);
await P.cryptoReady();

let raw = "";
for await (const chunk of process.stdin) raw += chunk;
const input = JSON.parse(raw);

const verify = (grant) =>
  P.verifyGrant({ grant, owner: grant.owner, jobId: grant.jobId, controlPlanePublic: input.controlPlanePublic, now: input.now });

const out = input.grants.map((grant) => ({
  schema: P.SignedGrant.safeParse(grant).success,
  verdict: verify(grant),
  statement: Buffer.from(P.grantStatement(grant)).toString("utf8"),
  tampered: verify({ ...grant, service: grant.service + "x" }),
}));
process.stdout.write(JSON.stringify(out));
