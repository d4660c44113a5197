package protocol

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"
)

// crockford has no I, L, O or U, so a fingerprint read aloud cannot be
// misheard as another one.
var crockford = base32.NewEncoding("0123456789ABCDEFGHJKMNPQRSTVWXYZ").WithPadding(base32.NoPadding)

// KeyID is the key id (and human fingerprint) of a base64url Ed25519
// identity key: "BYOLLM-" and six groups of four Crockford base32 digits of
// the first 15 bytes of SHA-256 over the raw key.
//
// The reference hashes whatever its lenient decoder yields and never fails;
// we refuse anything that is not exactly a 32-byte key, because a key id of
// garbage is a name for nothing and would only ever match another mistake.
func KeyID(identityPublic string) (string, error) {
	raw, err := UnB64Len(identityPublic, ed25519.PublicKeySize)
	if err != nil {
		return "", fmt.Errorf("key id: identity key: %w", err)
	}
	return keyIDOfRaw(raw), nil
}

// keyIDOfRaw is the fingerprint recipe over raw key bytes.
func keyIDOfRaw(raw []byte) string {
	sum := sha256.Sum256(raw)
	digits := crockford.EncodeToString(sum[:15]) // 120 bits = 24 digits
	groups := make([]string, 0, 6)
	for i := 0; i < len(digits); i += 4 {
		groups = append(groups, digits[i:i+4])
	}
	return "BYOLLM-" + strings.Join(groups, "-")
}
