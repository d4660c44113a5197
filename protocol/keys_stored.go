package protocol

import (
	"bytes"
	"encoding/base64"
	"fmt"
)

// PKCS#8 DER for Ed25519 and X25519 is a fixed 16-byte prefix and the
// 32-byte secret, which is what Node's key export writes.
var (
	pkcs8Ed25519 = []byte{0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20}
	pkcs8X25519  = []byte{0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x04, 0x22, 0x04, 0x20}
)

// StoredKeys is the at-rest key file of a daemon, site or control plane
// in the protocol's format: public values base64url, private values standard
// base64 of PKCS#8 DER. It holds secrets: it is for files on the owner's
// machine, never for the wire and never for a relay.
type StoredKeys struct {
	Version           int    `json:"version"`
	IdentityPublic    string `json:"identityPublic"`
	IdentityPrivate   string `json:"identityPrivate"`
	EncryptionPublic  string `json:"encryptionPublic"`
	EncryptionPrivate string `json:"encryptionPrivate"`
	EncryptionSig     string `json:"encryptionSig"`
	CreatedAt         int64  `json:"createdAt"`
}

// Stored is the key file form of k, stamped createdAt (epoch ms).
func (k *Keys) Stored(createdAt int64) StoredKeys {
	return StoredKeys{
		Version:           1,
		IdentityPublic:    k.public.Identity,
		IdentityPrivate:   base64.StdEncoding.EncodeToString(append(bytes.Clone(pkcs8Ed25519), k.identity.Seed()...)),
		EncryptionPublic:  k.public.Encryption,
		EncryptionPrivate: base64.StdEncoding.EncodeToString(append(bytes.Clone(pkcs8X25519), k.encryption[:]...)),
		EncryptionSig:     k.public.EncryptionSig,
		CreatedAt:         createdAt,
	}
}

// Keys reads a key file back. The public halves are re-derived and must
// equal the stored ones, and the stored encryptionSig must verify: a file
// whose halves disagree would sign as one party and open as another.
func (s StoredKeys) Keys() (*Keys, error) {
	if s.Version != 1 {
		return nil, fmt.Errorf("stored keys: version %d, want 1", s.Version)
	}
	seed, err := pkcs8Secret(s.IdentityPrivate, pkcs8Ed25519)
	if err != nil {
		return nil, fmt.Errorf("stored keys: identityPrivate: %w", err)
	}
	scalar, err := pkcs8Secret(s.EncryptionPrivate, pkcs8X25519)
	if err != nil {
		return nil, fmt.Errorf("stored keys: encryptionPrivate: %w", err)
	}
	k, err := NewKeys(seed, scalar)
	if err != nil {
		return nil, fmt.Errorf("stored keys: %w", err)
	}
	if k.public.Identity != s.IdentityPublic || k.public.Encryption != s.EncryptionPublic {
		return nil, fmt.Errorf("stored keys: public keys do not match the private keys")
	}
	if !VerifyPublicIdentity(PublicIdentity{Identity: s.IdentityPublic, Encryption: s.EncryptionPublic, EncryptionSig: s.EncryptionSig}) {
		return nil, fmt.Errorf("stored keys: encryptionSig does not verify")
	}
	return k, nil
}

func pkcs8Secret(stdB64 string, prefix []byte) ([]byte, error) {
	der, err := base64.StdEncoding.DecodeString(stdB64)
	if err != nil {
		return nil, fmt.Errorf("not standard base64: %w", err)
	}
	if len(der) != len(prefix)+32 || !bytes.Equal(der[:len(prefix)], prefix) {
		return nil, fmt.Errorf("not a PKCS#8 key of the expected type")
	}
	return der[len(prefix):], nil
}
