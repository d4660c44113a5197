// Package grants is byorelay's grant author: the control plane's half of
// signed grants, signing one protocol.SignedGrant per claimed job with an
// Ed25519 control-plane key, as @byollm/control-plane 0.1.1's ControlPlane
// does.
//
// A relay configured with Author.Public as ControlPlanePublic hands that key
// to every daemon it pairs, and a byollm daemon that pinned one runs nothing
// without a grant signed by it (relayed mode): its owner's own jobs and, the
// point of it, jobs of roster members the relay routes to it. Without a key
// a daemon is in direct mode and serves its owner only.
//
// # The grant law
//
// Each grant is decided by the reference engine's law, in its order and
// words (law.go); the first step that fails is the reason:
//
//  1. The job owner's consent for the site: none (never given, or revoked)
//     declines "not-consented", permanently; paused declines
//     "consent-paused", transiently (a pause is its owner's to lift).
//  2. Membership, asked only about other people: a job owner who may not
//     use the device owner's machines (on none of their rosters, or
//     removed) declines "not-a-member", permanently. A device always runs
//     its own owner's work.
//  3. The person's mapping for (purpose, kind), the purpose being the
//     stub's or the reserved "default": none declines "unmapped",
//     transiently (they may map it a minute from now). Nothing is guessed
//     from what the device advertises: a device with two services for a
//     kind runs the one its owner mapped, and an unmapped slot waits even
//     where one service would fit.
//  4. The mapped service's owner (the person themselves unless the mapping
//     names another) is the claiming device's owner, or the decline is
//     "resolved-elsewhere", transient: a service id means something only in
//     its owner's namespace, so a teammate's same-named service is another
//     machine.
//  5. The device advertised the mapped service for the job's kind, at a
//     scope that widens to others ("team"; an allowlist, so a scope this
//     build does not know stays narrow), or the job is its owner's own, for
//     whom "private" counts. Otherwise "resolved-elsewhere", transient: an
//     owner narrowing an offer for a minute must not unpick the job from
//     this device for good.
//
// The grant names the mapped service. With no policy read to check against
// the decline is "store-unavailable", transient: a failed read says
// nothing about the job.
//
// The relay releases a permanent decline as refused (never offered to this
// device again), exactly as it does a daemon's refusal, and a transient one
// with a not-before. Every decline is logged (decision=grant-declined) and
// counted by reason (relay.Metrics).
//
// # The authority, over the filter's read
//
// The relay's claim routes are built from the projection (consent, pause,
// revocation and rosters applied by projection.RoutesFor) and the author
// checks the law against that same projection, handed over in
// grant.Request: two code paths over one read, so a claim costs no
// second read, and the two cannot disagree about what the world was. The
// filter is an optimisation; the law is the authority. A grant is the
// device's only evidence of consent and membership, so a routing bug must
// become a decline here, never a validly signed admission.
//
// # Custody of the key
//
// The author signs through a Signer, which holds the key. Two do:
//
//   - SeedSigner: a 32-byte seed (base64) held in the process's memory,
//     from an SSM SecureString parameter when deployed (SeedFromParameter)
//     or from a git-ignored file locally (LoadOrCreateSeedFile). It is never
//     logged (protocol.Keys redacts itself) and never written anywhere
//     else, but every function that signs can read it.
//   - KMSSigner: an AWS KMS key of spec ECC_NIST_EDWARDS25519. The private
//     key never leaves KMS; a function may ask for signatures (kms:Sign)
//     and nothing more, and each grant is one call to KMS.
//
// Either way the signature covers protocol.GrantStatement's bytes, so the
// grant a device receives is the same bytes whichever signer made it.
package grants
