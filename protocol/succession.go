package protocol

import (
	"fmt"
	"slices"
)

// SuccessionContext is the domain separator of a site key succession
// statement.
const SuccessionContext = "byollm/v1/site-succession"

// RetirementWindowMs is how long a retired site key may still sign site
// requests: a protocol constant, since a
// site that could choose it could choose forever.
const RetirementWindowMs = 7 * 24 * 60 * 60 * 1000

// SuccessionStatement is the exact bytes K1 signs to hand over to K2. It
// names both key ids, so a succession lifted from one site's record cannot
// move another site to the attacker's key.
func SuccessionStatement(fromKeyID, toKeyID string) []byte {
	return []byte(SuccessionContext + ":" + fromKeyID + ":" + toKeyID)
}

// SignSuccession is previous's signed hand-over to next. Only the holder of
// the retiring key can make one, which is the whole reason rotation can be
// automatic: a relay never holds it.
func SignSuccession(previous *Keys, next PublicIdentity) (Succession, error) {
	nextID, err := KeyID(next.Identity)
	if err != nil {
		return Succession{}, fmt.Errorf("sign succession: successor: %w", err)
	}
	return Succession{
		Identity:  previous.Public(),
		Signature: previous.Sign(SuccessionStatement(previous.KeyID(), nextID)),
	}, nil
}

// VerifyLink checks that link.Identity signed over being succeeded by
// toKeyID. toKeyID is the caller's, never read from the link: a verifier
// that took the successor from the statement would accept a genuine
// signature naming some other successor. The predecessor's own
// encryptionSig is checked first, as everywhere a PublicIdentity arrives.
func VerifyLink(link Succession, toKeyID string) bool {
	if !VerifyPublicIdentity(link.Identity) {
		return false
	}
	fromKeyID, err := KeyID(link.Identity.Identity)
	if err != nil {
		return false
	}
	return verifyWith(link.Identity.Identity, SuccessionStatement(fromKeyID, toKeyID), link.Signature)
}

// SuccessionFailure is why a chain was refused.
type SuccessionFailure string

const (
	SuccessionNoChain       SuccessionFailure = "no-chain"
	SuccessionTooLong       SuccessionFailure = "too-long"
	SuccessionUnknownOrigin SuccessionFailure = "unknown-origin"
	SuccessionBrokenLink    SuccessionFailure = "broken-link"
)

// SuccessionWalk is the outcome of WalkSuccession.
type SuccessionWalk struct {
	// Path is the key ids the chain passes through, oldest first, ending at
	// the current key.
	Path []string
	// From is the approved key id the chain reached; "" when it reached none.
	From string
	// Failure is why no approved key was reached; "" on success.
	Failure SuccessionFailure
}

// WalkSuccession walks chain (oldest first, as the projection carries it,
// so its last link is the one that signed for current) back from current
// until a link's key is approved. It returns
// rather than fails: a chain that does not verify is ordinary hostile input,
// and the caller keeps its existing pin. Chains longer than
// MaxSuccessionChain are refused before any signature is checked, so a
// projection cannot make a daemon verify thousands of them.
func WalkSuccession(current string, chain []Succession, approved func(keyID string) bool) SuccessionWalk {
	if len(chain) == 0 {
		return SuccessionWalk{Path: []string{current}, Failure: SuccessionNoChain}
	}
	if len(chain) > MaxSuccessionChain {
		return SuccessionWalk{Path: []string{current}, Failure: SuccessionTooLong}
	}
	path := []string{current}
	succeeding := current
	for _, link := range slices.Backward(chain) {
		if !VerifyLink(link, succeeding) {
			return SuccessionWalk{Path: path, Failure: SuccessionBrokenLink}
		}
		previous, _ := KeyID(link.Identity.Identity) // VerifyLink decoded it
		path = slices.Insert(path, 0, previous)
		if approved(previous) {
			return SuccessionWalk{Path: path, From: previous}
		}
		succeeding = previous
	}
	return SuccessionWalk{Path: path, Failure: SuccessionUnknownOrigin}
}
