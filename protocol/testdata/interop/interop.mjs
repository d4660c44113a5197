// Interop with the real @byollm/protocol 0.1.1, driven by protocol/interop_test.go.
// Usage: node interop.mjs <node_modules dir>   (input JSON on stdin, output JSON on stdout)
// The Go test passes what Go produced; this script verifies it with the
// reference library and produces the reference's own artifacts for Go to verify.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const P = await import(pathToFileURL(join(process.argv[2], "@byollm", "protocol", "dist", "index.js")).href);
await P.cryptoReady();

let raw = "";
for await (const chunk of process.stdin) raw += chunk;
const input = JSON.parse(raw);
const { now } = input;
const out = { checks: {} };

// --- Go -> JS --------------------------------------------------------------
const goSite = input.goKeys.site;
const goDevice = input.goKeys.device;
const goCp = input.goKeys.controlPlane;

out.checks.keyIds = {
  site: P.keyId(goSite.identityPublic),
  device: P.keyId(goDevice.identityPublic),
  controlPlane: P.keyId(goCp.identityPublic),
};
out.checks.storedKeysParse = [goSite, goDevice, goCp].every((k) => P.StoredKeys.safeParse(k).success);
out.checks.identitiesVerify = [goSite, goDevice, goCp].every((k) => P.verifyPublicIdentity(P.publicIdentityOf(k)));

const r = input.goRequests;
out.checks.daemonRequest = P.verifyRequest({
  identityPublic: goDevice.identityPublic, endpoint: r.daemon.endpoint, body: r.daemon.body,
  signature: { runnerId: r.daemon.callerId, issuedAt: r.daemon.issuedAt, signature: r.daemon.signature }, now,
});
out.checks.daemonRequestStale = P.verifyRequest({
  identityPublic: goDevice.identityPublic, endpoint: r.daemon.endpoint, body: r.daemon.body,
  signature: { runnerId: r.daemon.callerId, issuedAt: r.daemon.issuedAt, signature: r.daemon.signature }, now: now + P.MAX_CLOCK_SKEW_MS + 1,
});
out.checks.siteRequest = P.verifySiteRequest({
  identityPublic: goSite.identityPublic, endpoint: r.site.endpoint, body: r.site.body,
  signature: { runnerId: r.site.callerId, issuedAt: r.site.issuedAt, signature: r.site.signature }, now,
});
out.checks.siteRequestOnDaemonPlane = P.verifyRequest({
  identityPublic: goSite.identityPublic, endpoint: r.site.endpoint, body: r.site.body,
  signature: { runnerId: r.site.callerId, issuedAt: r.site.issuedAt, signature: r.site.signature }, now,
});

const e = input.goEnvelope;
out.checks.envelopeSchema = P.SealedEnvelope.safeParse(e.envelope).success;
out.checks.envelopeOpen = await P.open({
  envelope: e.envelope, recipientKeys: goDevice, senderIdentityPublic: goSite.identityPublic, expected: e.expected,
});
out.checks.envelopeOpenOtherJob = await P.open({
  envelope: e.envelope, recipientKeys: goDevice, senderIdentityPublic: goSite.identityPublic, expected: { ...e.expected, jobId: "job_other" },
});

out.checks.grantSchema = P.SignedGrant.safeParse(input.goGrant).success;
out.checks.grant = P.verifyGrant({ grant: input.goGrant, owner: input.goGrant.owner, jobId: input.goGrant.jobId, controlPlanePublic: goCp.identityPublic, now });
out.checks.grantStatement = Buffer.from(P.grantStatement(input.goGrant)).toString("utf8");
out.checks.grantTampered = P.verifyGrant({ grant: { ...input.goGrant, service: input.goGrant.service + "x" }, owner: input.goGrant.owner, jobId: input.goGrant.jobId, controlPlanePublic: goCp.identityPublic, now });

out.checks.successionLink = P.verifyLink(input.goSuccession.link, input.goSuccession.toKeyId);

// The relay's measures, for Go's to be compared against.
out.checks.envelopeBytes = input.sizeProbes.map((env) => P.envelopeBytes(env));
out.checks.tooLargeMessages = input.tooLargeProbes.map((bytes) => P.tooLargeMessage({ bytes, limit: P.MAX_ENVELOPE_BYTES }));
// What the relay makes of an x-byollm-issued-at header (the package's signatureFrom and RequestSignature).
out.checks.issuedAtHeaders = input.issuedAtProbes.map((header) => {
  const parsed = P.RequestSignature.safeParse({ runnerId: "r", issuedAt: Number(header), signature: "s" });
  return parsed.success ? parsed.data.issuedAt : 0;
});

// --- JS -> Go --------------------------------------------------------------
const jsSite = P.generateKeys(now);
const jsDevice = P.generateKeys(now);
const jsCp = P.generateKeys(now);
out.jsKeys = { site: jsSite, device: jsDevice, controlPlane: jsCp };
out.jsKeyIds = { site: P.keyId(jsSite.identityPublic), device: P.keyId(jsDevice.identityPublic) };

const daemonBody = JSON.stringify({ protocolVersion: "2", runnerId: "runner_js", capabilities: [], max: 2 });
out.jsRequests = {
  daemon: { endpoint: "claim", body: daemonBody, ...P.signRequest(jsDevice, { endpoint: "claim", runnerId: "runner_js", issuedAt: now, body: daemonBody }) },
  site: { endpoint: "pending", body: "", ...P.signSiteRequest(jsSite, { endpoint: "pending", siteId: "site_js", issuedAt: now, body: "" }) },
};

const payloadPlain = input.jsPlaintext;
out.jsPayload = {
  plaintext: payloadPlain,
  envelope: await P.seal({
    plaintext: payloadPlain, senderKeys: jsSite, recipientEncryptionPublic: goDevice.encryptionPublic,
    context: { jobId: "job_js", senderKeyId: out.jsKeyIds.site, recipientKeyId: out.checks.keyIds.device, deadlineAt: now + P.ENVELOPE_MAX_AGE_MS, direction: "payload" },
  }),
};
const resultPlain = JSON.stringify({ outcome: { outcome: "ok", text: "Salut !" }, ran: { model: "m", backendClass: "http", durationMs: 5 } });
out.jsResult = {
  plaintext: resultPlain,
  envelope: await P.seal({
    plaintext: resultPlain, senderKeys: jsDevice, recipientEncryptionPublic: goSite.encryptionPublic,
    context: { jobId: "job_js", senderKeyId: out.jsKeyIds.device, recipientKeyId: out.checks.keyIds.site, deadlineAt: now + P.ENVELOPE_MAX_AGE_MS, direction: "result" },
  }),
};
const { signature: _goSignature, ...goClaims } = input.goGrant;
out.jsGrant = P.signGrant(jsCp, { ...goClaims, grantId: "grant_js" });
out.jsSuccession = { link: P.signSuccession(jsSite, P.publicIdentityOf(jsDevice)), toKeyId: out.jsKeyIds.device };

process.stdout.write(JSON.stringify(out));
