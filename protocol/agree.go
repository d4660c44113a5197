package protocol

import (
	"crypto/ecdh"
	"fmt"

	"golang.org/x/crypto/curve25519"
)

// Agree is the X25519 shared secret between k's encryption key and a peer's
// encryption public key (base64url, as PublicIdentity carries it). It is
// not part of BYOLLM v2: the proposed streaming extension derives a per-job
// key from it (docs/streaming.md). A low-order peer key, whose secret would
// be all zeros, is refused.
func (k *Keys) Agree(peerEncryptionPublic string) ([]byte, error) {
	peer, err := UnB64Len(peerEncryptionPublic, curve25519.PointSize)
	if err != nil {
		return nil, fmt.Errorf("agree: peer encryption key: %w", err)
	}
	pub, err := ecdh.X25519().NewPublicKey(peer)
	if err != nil {
		return nil, fmt.Errorf("agree: %w", err)
	}
	secret, err := k.x25519.ECDH(pub) // one scalar multiplication (see sealBox)
	if err != nil {
		return nil, fmt.Errorf("agree: %w", err)
	}
	return secret, nil
}
