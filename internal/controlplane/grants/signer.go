package grants

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/byorelay/byorelay/protocol"
)

// Signer holds the control-plane key: the public half devices pin at
// pairing, and Ed25519 signing with the private half, wherever that is
// kept. Safe for concurrent use.
type Signer interface {
	// Public is the key's identity in the protocol's form: the raw 32-byte
	// Ed25519 public key, base64url without padding.
	Public() string
	// Sign is the pure Ed25519 (RFC 8032) signature, 64 bytes, over
	// message as given: the grant statement, never a digest of it, or no
	// device verifies it.
	Sign(ctx context.Context, message []byte) ([]byte, error)
}

// SeedSigner signs with a seed held in this process's memory: the local
// stack's key file, or an SSM SecureString read by the function.
type SeedSigner struct {
	key *protocol.Keys
}

// NewSeedSigner holds a 32-byte Ed25519 seed as protocol.Keys, which never
// print or serialise their private half. Keys also carry an encryption
// key, which a control plane never uses (it opens nothing): a random one,
// so nothing secret is derived from the signing seed for a purpose it was
// not made for.
func NewSeedSigner(seed []byte) (*SeedSigner, error) {
	var unused [32]byte
	if _, err := rand.Read(unused[:]); err != nil {
		return nil, fmt.Errorf("grants: %w", err)
	}
	key, err := protocol.NewKeys(seed, unused[:])
	if err != nil {
		return nil, fmt.Errorf("grants: control-plane key: %w", err)
	}
	return &SeedSigner{key: key}, nil
}

// Public is the seed's public key.
func (s *SeedSigner) Public() string { return s.key.Public().Identity }

// Sign signs message with the seed; it never fails.
func (s *SeedSigner) Sign(_ context.Context, message []byte) ([]byte, error) {
	return protocol.UnB64(s.key.Sign(message))
}

// sign is claims signed by the author's signer: over the exact statement
// bytes the daemon rebuilds (protocol.GrantStatement), so a signer held
// anywhere makes the grant the seed would have made, byte for byte.
func (a *Author) sign(ctx context.Context, claims protocol.SignedGrant) (protocol.SignedGrant, error) {
	statement, err := protocol.GrantStatement(claims)
	if err != nil {
		return protocol.SignedGrant{}, fmt.Errorf("grants: %w", err)
	}
	signature, err := a.signer.Sign(ctx, statement)
	if err != nil {
		return protocol.SignedGrant{}, fmt.Errorf("grants: sign grant: %w", err)
	}
	return protocol.AttachGrantSignature(claims, signature)
}
