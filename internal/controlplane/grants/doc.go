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
// # Policy: what this author declines, and what it leaves to the relay
//
// The reference engine re-checks, in order: consent (refused or paused),
// membership, the person's mapping of (purpose, kind) to a service, and that
// this device offers that service to this person. byorelay's relay already
// rules out the first two before it asks: its claim routes are built from
// the same projection, read in the same request, with consent, pause,
// revocation and rosters applied (projection.RoutesFor), and a job whose
// site the projection cannot place is declined by the relay itself. Checking
// them again here against the same snapshot would be a second copy of one
// policy, free to drift from the first.
//
// byorelay has no mapping store, so the mapping's answer (which service)
// comes from what the device advertised, under the reference's own offer law:
//
//   - A service is eligible for a job if it serves the job's kind and either
//     the job is the device owner's own, or its offer scope widens to others
//     (an allowlist: only "team"; a scope this build does not know stays
//     narrow, so a renamed scope fails closed).
//   - Exactly one eligible service: granted for it.
//   - None: declined "resolved-elsewhere", transient, as the reference does
//     (the owner may widen the offer; a permanent refusal would outlive that).
//   - More than one: declined "ambiguous-service", transient. The wire does
//     not say which one is the owner's default, and picking one could run a
//     person's work on a metered service nobody chose for it (the substitution
//     NO_PAYLOAD_ROUTING forbids). The remedy is the owner's: offer one
//     service per kind to whom the job belongs.
//
// Nothing here declines permanently: the two permanent reasons of the
// reference (not-consented, not-a-member) are the relay's to enforce.
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
