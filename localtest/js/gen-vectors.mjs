// Regenerates protocol/testdata/vectors/byollm-v2-vectors.json from fixed
// seeds with the @byollm/protocol 0.1.1 and libsodium-wrappers 0.8.4 pinned
// in this folder's package-lock.json (see protocol/testdata/vectors/README.md).
// Run from the repository root: make vectors
// (or: cd localtest/js && npm ci && node gen-vectors.mjs > ../../protocol/testdata/vectors/byollm-v2-vectors.json).
// Only resultEnvelope.envelope.ciphertext (a random ephemeral key) and the node
// version in generatedWith change between runs; protocol's
// TestVectorsRegenerateFromThePinnedPackage checks that the rest is byte for byte
// the committed file.
import { createHash, createPrivateKey, createPublicKey, sign as edSign } from "node:crypto";
import sodium from "libsodium-wrappers";
import * as P from "@byollm/protocol";

await sodium.ready;
const hex = (b) => Buffer.from(b).toString("hex");
const b64u = (b) => Buffer.from(b).toString("base64url");
const seedOf = (label) => createHash("sha256").update(label).digest(); // 32 bytes

const ED_PKCS8 = Buffer.from("302e020100300506032b657004220420", "hex");
const X_PKCS8  = Buffer.from("302e020100300506032b656e04220420", "hex");

function keysFrom(name) {
  const idSeed = seedOf(`byollm-vector/${name}/identity`);
  const encSeed = seedOf(`byollm-vector/${name}/encryption`);
  const idPriv = createPrivateKey({ key: Buffer.concat([ED_PKCS8, idSeed]), format: "der", type: "pkcs8" });
  const encPriv = createPrivateKey({ key: Buffer.concat([X_PKCS8, encSeed]), format: "der", type: "pkcs8" });
  const identityPublic = createPublicKey(idPriv).export({ format: "jwk" }).x;
  const encryptionPublic = createPublicKey(encPriv).export({ format: "jwk" }).x;
  const encryptionSig = edSign(null, Buffer.from(`${P.ENCRYPTION_KEY_CONTEXT}:${encryptionPublic}`), idPriv).toString("base64url");
  const stored = {
    version: 1,
    identityPublic,
    identityPrivate: idPriv.export({ type: "pkcs8", format: "der" }).toString("base64"),
    encryptionPublic,
    encryptionPrivate: encPriv.export({ type: "pkcs8", format: "der" }).toString("base64"),
    encryptionSig,
    createdAt: 1800000000000,
  };
  P.StoredKeys.parse(stored);
  if (!P.verifyPublicIdentity(P.publicIdentityOf(stored))) throw new Error("bad identity");
  return { name, idSeed: hex(idSeed), encSeed: hex(encSeed), stored, pub: P.publicIdentityOf(stored), keyId: P.keyId(identityPublic) };
}

const site = keysFrom("site");
const device = keysFrom("device");
const cp = keysFrom("control-plane");
const out = { generatedWith: "@byollm/protocol 0.1.1 dist + libsodium-wrappers 0.8.4, node " + process.version };

out.keys = {};
for (const k of [site, device, cp]) {
  out.keys[k.name] = {
    ed25519_seed_hex: k.idSeed,
    x25519_private_hex: k.encSeed,
    identity_b64url: k.pub.identity,
    identity_hex: hex(Buffer.from(k.pub.identity, "base64url")),
    encryption_b64url: k.pub.encryption,
    encryption_hex: hex(Buffer.from(k.pub.encryption, "base64url")),
    encryptionSig_signed_message: `${P.ENCRYPTION_KEY_CONTEXT}:${k.pub.encryption}`,
    encryptionSig_b64url: k.pub.encryptionSig,
    keyId: k.keyId,
    sha256_of_identity_hex: createHash("sha256").update(Buffer.from(k.pub.identity, "base64url")).digest("hex"),
    storedKeys_identityPrivate_pkcs8_b64: k.stored.identityPrivate,
    storedKeys_encryptionPrivate_pkcs8_b64: k.stored.encryptionPrivate,
  };
}

// ---- request signing
const claimBody = JSON.stringify({ protocolVersion: "2", runnerId: "runner_1", capabilities: [], max: 4 });
const issuedAt = 1800000000000;
const canon = P.canonicalRequest({ endpoint: "claim", runnerId: "runner_1", issuedAt, body: claimBody });
const reqSig = P.signRequest(device.stored, { endpoint: "claim", runnerId: "runner_1", issuedAt, body: claimBody });
if (P.verifyRequest({ identityPublic: device.pub.identity, endpoint: "claim", body: claimBody, signature: reqSig, now: issuedAt }) !== null) throw new Error("req verify");
out.daemonRequest = {
  method: "POST", path: "/byollm/claim",
  headers: { "content-type": "application/json", "x-byollm-runner": "runner_1", "x-byollm-issued-at": String(issuedAt), "x-byollm-signature": reqSig.signature },
  body: claimBody,
  body_sha256_hex: createHash("sha256").update(claimBody, "utf8").digest("hex"),
  canonical_string: canon.toString("utf8"),
  canonical_hex: canon.toString("hex"),
  signer: "device identity key",
};
const enqBody = JSON.stringify({ protocolVersion: "2", siteId: "site_demo", stub: { id: "job_1", kind: "llm.chat", owner: "alice", site: site.keyId, audience: "private", sizeClass: "small", streaming: false, deadlineAt: 1800003600000 } });
const siteSig = P.signSiteRequest(site.stored, { endpoint: "enqueue", siteId: "site_demo", issuedAt, body: enqBody });
if (P.verifySiteRequest({ identityPublic: site.pub.identity, endpoint: "enqueue", body: enqBody, signature: siteSig, now: issuedAt }) !== null) throw new Error("site verify");
out.siteRequestPost = {
  method: "POST", path: "/relay/site/enqueue",
  headers: { "content-type": "application/json", "x-byollm-site": "site_demo", "x-byollm-issued-at": String(issuedAt), "x-byollm-signature": siteSig.signature },
  body: enqBody,
  canonical_string: P.canonicalRequest({ endpoint: "site/enqueue", runnerId: "site_demo", issuedAt, body: enqBody }).toString("utf8"),
};
const getSig = P.signSiteRequest(site.stored, { endpoint: "pending", siteId: "site_demo", issuedAt, body: "" });
out.siteRequestGet = {
  method: "GET", path: "/relay/site/pending?siteId=site_demo&protocolVersion=2",
  headers: { "x-byollm-site": "site_demo", "x-byollm-issued-at": String(issuedAt), "x-byollm-signature": getSig.signature },
  body: "",
  canonical_string: P.canonicalRequest({ endpoint: "site/pending", runnerId: "site_demo", issuedAt, body: "" }).toString("utf8"),
};

// ---- envelope: deterministic construction with fixed ephemeral key
const payloadPlain = JSON.stringify({ messages: [{ role: "user", content: "Say hi in French." }] });
P.ChatPayload.parse(JSON.parse(payloadPlain));
const ctx = { jobId: "job_1", senderKeyId: site.keyId, recipientKeyId: device.keyId, deadlineAt: 1800086400000, direction: "payload" };
const body = Buffer.from(JSON.stringify({ v: "byollm/v1/envelope", jobId: ctx.jobId, senderKeyId: ctx.senderKeyId, recipientKeyId: ctx.recipientKeyId, deadlineAt: ctx.deadlineAt, direction: ctx.direction, plaintext: payloadPlain }), "utf8");
const bodySig = P.signWith(site.stored, body);
const inner = JSON.stringify({ body: body.toString("base64url"), signature: bodySig });
const ephSeed = seedOf("byollm-vector/ephemeral");
const eph = sodium.crypto_box_seed_keypair(ephSeed);
const rpk = new Uint8Array(Buffer.from(device.pub.encryption, "base64url"));
const nonce = sodium.crypto_generichash(24, new Uint8Array([...eph.publicKey, ...rpk]));
const boxed = sodium.crypto_box_easy(new Uint8Array(Buffer.from(inner, "utf8")), nonce, rpk, eph.privateKey);
const sealedBytes = new Uint8Array([...eph.publicKey, ...boxed]);
const envelope = { ciphertext: b64u(sealedBytes), recipientKeyId: ctx.recipientKeyId, senderKeyId: ctx.senderKeyId, direction: "payload", deadlineAt: ctx.deadlineAt };
P.SealedEnvelope.parse(envelope);
const opened = await P.open({ envelope, recipientKeys: device.stored, senderIdentityPublic: site.pub.identity, expected: { jobId: "job_1", senderKeyId: site.keyId, recipientKeyId: device.keyId, direction: "payload" } });
if (!opened.ok || opened.plaintext !== payloadPlain) throw new Error("det envelope did not open: " + JSON.stringify(opened));
out.payloadEnvelope = {
  note: "site -> device, payload leg; sealed box built with a FIXED ephemeral key so it is reproducible",
  plaintext: payloadPlain,
  signed_body_utf8: body.toString("utf8"),
  signed_body_signature_b64url: bodySig,
  inner_json: inner,
  ephemeral_x25519_private_hex: hex(eph.privateKey),
  ephemeral_x25519_public_hex: hex(eph.publicKey),
  nonce_blake2b24_hex: hex(nonce),
  sealed_box_hex_len: sealedBytes.length,
  envelope,
  open_with: { recipient: "device", sender_identity: "site" },
};

// ---- result envelope via the library's own seal (random ephemeral) — open-only vector
const outcome = P.SealedOutcome.parse({ outcome: { outcome: "ok", text: "Salut !" }, ran: { model: "llama3.2:3b", backendClass: "http", durationMs: 812, stop: "end", stopReported: true } });
const resultPlain = JSON.stringify(outcome);
const resEnv = await P.seal({ plaintext: resultPlain, senderKeys: device.stored, recipientEncryptionPublic: site.pub.encryption, context: { jobId: "job_1", senderKeyId: device.keyId, recipientKeyId: site.keyId, deadlineAt: 1800086400000, direction: "result" } });
const reopen = await P.open({ envelope: resEnv, recipientKeys: site.stored, senderIdentityPublic: device.pub.identity, expected: { jobId: "job_1", senderKeyId: device.keyId, recipientKeyId: site.keyId, direction: "result" } });
if (!reopen.ok) throw new Error("result open");
out.resultEnvelope = { note: "device -> site, result leg, produced by @byollm/protocol seal() (random ephemeral); a Go opener must recover plaintext", plaintext: resultPlain, envelope: resEnv, disposition: "ok", open_with: { recipient: "site", sender_identity: "device" } };

// ---- grant
const claims = { grantId: "grant_00000000-0000-4000-8000-000000000001", jobId: "job_1", site: site.keyId, user: "alice", owner: "bob", purpose: "default", kind: "llm.chat", service: "ollama-small", issuedAt: 1800000000000 };
const grant = P.signGrant(cp.stored, claims);
P.SignedGrant.parse(grant);
if (P.verifyGrant({ grant, owner: "bob", jobId: "job_1", controlPlanePublic: cp.pub.identity, now: 1800000001000 }) !== null) throw new Error("grant");
out.grant = { GRANT_SIGNED_FIELDS: P.GRANT_SIGNED_FIELDS, statement_utf8: Buffer.from(P.grantStatement(claims)).toString("utf8"), grant, signer: "control-plane identity key (controlPlanePublic = keys.control-plane.identity_b64url)" };

// ---- succession (site K1 -> K2)
const site2 = keysFrom("site2");
const link = P.signSuccession(site.stored, site2.pub);
if (!P.verifyLink(link, site2.keyId)) throw new Error("link");
out.keys.site2 = { ed25519_seed_hex: site2.idSeed, x25519_private_hex: site2.encSeed, identity_b64url: site2.pub.identity, encryption_b64url: site2.pub.encryption, encryptionSig_b64url: site2.pub.encryptionSig, keyId: site2.keyId };
out.succession = { statement_utf8: Buffer.from(P.successionStatement(site.keyId, site2.keyId)).toString("utf8"), link };

// ---- a full ClaimResponse, parsed by the 0.1.1 schema
const claimResp = P.ClaimResponse.parse({ jobs: [{ id: "job_1", kind: "llm.chat", owner: "alice", site: site.keyId, audience: "team", purpose: "default", sizeClass: "small", streaming: false, deadlineAt: 1800003600000, lease: { id: "6f1c2a9e-3b7d-4c1e-9a55-0d2f8e7b4a10", runnerId: "runner_1", expiresAt: 1800000060000 }, grant }], leaseMs: 60000 });
out.claimResponse = claimResp;
const hb = P.HeartbeatResponse.parse({ sites: { [site.keyId]: site.pub }, cancel: [], lost: [], serverTime: 1800000000000, awaitingConsent: [] });
out.heartbeatResponse = hb;
const hbReq = P.HeartbeatRequest.parse({ protocolVersion: "2", runnerId: "runner_1", daemonVersion: "0.1.1", capabilities: [{ kind: "llm.chat", service: "ollama-small", backendId: "ollama", backendClass: "http", model: "llama3.2:3b", offerScope: "team" }], activeLeases: [{ jobId: "job_1", leaseId: "6f1c2a9e-3b7d-4c1e-9a55-0d2f8e7b4a10" }] });
out.heartbeatRequestParsed = hbReq;
// version refusal body
out.versionRefusal = P.checkProtocolVersion({ protocolVersion: "0" });
out.versionRefusalMissing = P.checkProtocolVersion({});

// fingerprint sanity: all-zero key
out.fingerprintOfZeroKey = { identity_b64url: b64u(Buffer.alloc(32)), keyId: P.keyId(b64u(Buffer.alloc(32))) };

console.log(JSON.stringify(out, null, 2));
