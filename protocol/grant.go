package protocol

import (
	"crypto/ed25519"
	"fmt"
)

// GrantContext is the grant statement's domain separator: a grant and a
// request are both "bytes this key signed", and without it one could be
// replayed as the other.
const GrantContext = "byollm/v1/grant"

// GrantMaxAgeMs is how long after issuedAt a grant is honoured. It bounds
// acceptance, not execution. The verifier's policy, deliberately not a field:
// a signer-chosen expiry would let the party being bounded choose the bound.
const GrantMaxAgeMs = 120_000

// ClockSkewWarnMs is how far in the future a grant's issuedAt may be before
// it is refused. With no tolerance, a device one millisecond behind its
// control plane would refuse every grant.
const ClockSkewWarnMs = 30_000

// GrantSignedFields are the SignedGrant fields the signature covers, in the
// statement's order: every field but the signature, sorted. A field missing
// here could be rewritten by an intermediary without breaking the signature;
// the tests check this list against the SignedGrant struct.
var GrantSignedFields = []string{"grantId", "issuedAt", "jobId", "kind", "owner", "purpose", "service", "site", "user"}

// GrantStatement is the exact bytes a grant's signature covers:
// JSON.stringify(["byollm/v1/grant", grantId, issuedAt, jobId, kind, owner,
// purpose, service, site, user]), with issuedAt a number. JSON, not a joined
// string, because a separator can be imitated by the values around it and
// JSON escapes its own. The signature field is ignored.
func GrantStatement(g SignedGrant) ([]byte, error) {
	return MarshalJS([]any{
		GrantContext,
		g.GrantID, g.IssuedAt, g.JobID, g.Kind, g.Owner, g.Purpose, g.Service, g.Site, g.User,
	})
}

// SignGrant signs claims with the control plane's identity key and returns
// the grant with its signature set (any signature in claims is replaced).
func SignGrant(controlPlane *Keys, claims SignedGrant) (SignedGrant, error) {
	statement, err := GrantStatement(claims)
	if err != nil {
		return SignedGrant{}, fmt.Errorf("sign grant: %w", err)
	}
	claims.Signature = controlPlane.Sign(statement)
	return claims, nil
}

// AttachGrantSignature is claims with signature set: the raw 64-byte Ed25519
// signature over GrantStatement(claims), made wherever the control plane's
// key is held (a KMS signs without handing the key over). It checks the
// length only; whether the signature verifies is VerifyGrant's question.
func AttachGrantSignature(claims SignedGrant, signature []byte) (SignedGrant, error) {
	if len(signature) != ed25519.SignatureSize {
		return SignedGrant{}, fmt.Errorf("sign grant: a signature of %d bytes, want %d", len(signature), ed25519.SignatureSize)
	}
	claims.Signature = B64(signature)
	return claims, nil
}

// GrantRefusal is why a grant was refused, split by
// remedy: fix the clock, take it up with the relay, or nothing (the refusal
// worked).
type GrantRefusal string

const (
	GrantBadSignature  GrantRefusal = "bad-signature"
	GrantWrongOwner    GrantRefusal = "wrong-owner"
	GrantWrongJob      GrantRefusal = "wrong-job"
	GrantExpired       GrantRefusal = "expired"
	GrantFromTheFuture GrantRefusal = "from-the-future"
)

func (r GrantRefusal) Error() string { return "protocol: grant refused: " + string(r) }

// GrantCheck is what a grant is verified against. Owner and JobID come from
// the verifier (the device's owner, the stub's id), never from the grant: a
// verifier that read its subject out of the signed bytes would accept a
// genuine grant for somebody else.
type GrantCheck struct {
	Owner              string
	JobID              string
	ControlPlanePublic string // the pinned control-plane identity key
	Now                int64  // verifier's clock, epoch ms
	MaxAgeMs           int64  // 0 means GrantMaxAgeMs
}

// VerifyGrant runs the protocol's document checks of a grant, in the
// reference's order:
// owner, job, from-the-future (more than ClockSkewWarnMs ahead), expired
// (older than the max age), and the signature last, so an expired grant
// reports expiry rather than whichever failure happened to be tested first.
// It returns nil or a GrantRefusal. Replay (grantId single use),
// offer-consistency and the private rule need device state and are the
// caller's.
func VerifyGrant(g SignedGrant, check GrantCheck) error {
	if g.Owner != check.Owner {
		return GrantWrongOwner
	}
	if g.JobID != check.JobID {
		return GrantWrongJob
	}
	maxAge := check.MaxAgeMs
	if maxAge == 0 {
		maxAge = GrantMaxAgeMs
	}
	age := check.Now - g.IssuedAt
	if age < -ClockSkewWarnMs {
		return GrantFromTheFuture
	}
	if age > maxAge {
		return GrantExpired
	}
	statement, err := GrantStatement(g)
	if err != nil || !verifyWith(check.ControlPlanePublic, statement, g.Signature) {
		return GrantBadSignature
	}
	return nil
}
