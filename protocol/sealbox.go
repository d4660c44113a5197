package protocol

import (
	"crypto/ecdh"
	"io"

	"golang.org/x/crypto/blake2b"
	"golang.org/x/crypto/nacl/box"
	//lint:ignore SA1019 HSalsa20 is box.Precompute's key derivation and nacl/box exports no other way to it; the box itself is sealed by nacl/box.
	"golang.org/x/crypto/salsa20/salsa"
)

// sealBox and openBox are libsodium's crypto_box_seal and
// crypto_box_seal_open, byte for byte what nacl/box's SealAnonymous and
// OpenAnonymous make and open (the reference vectors and the real-peer
// tests hold them to it): an ephemeral X25519 key, the nonce
// BLAKE2b-192(ephemeral public || recipient public), and XSalsa20-Poly1305
// under HSalsa20 of the X25519 shared secret.
//
// They are written out because x/crypto's X25519 (curve25519.X25519,
// through crypto/ecdh's NewPrivateKey) derives the scalar's own public key
// on every call, which box.Precompute then throws away: sealing cost three
// scalar multiplications where two are needed, opening two where one is,
// and they were the largest CPU cost of every party that seals (the bench
// driver's profile). Here the ephemeral key's public half is the one
// derived, and the recipient's scalar is made once (Keys.x25519).
//
// A shared secret of all zeros (a low-order public key on either side) is
// refused, as libsodium refuses it (crypto_box_beforenm fails), where
// box.Precompute would have sealed under a key anyone can compute.

// sealBox seals message to the recipient's raw X25519 public key, drawing
// the ephemeral key's 32 bytes from random (as box.GenerateKey does).
func sealBox(random io.Reader, message, recipientPublic []byte) ([]byte, error) {
	var scalar [32]byte
	if _, err := io.ReadFull(random, scalar[:]); err != nil {
		return nil, err
	}
	ephemeral, err := ecdh.X25519().NewPrivateKey(scalar[:])
	if err != nil {
		return nil, err
	}
	recipient, err := ecdh.X25519().NewPublicKey(recipientPublic)
	if err != nil {
		return nil, err
	}
	key, err := boxKey(ephemeral, recipient)
	if err != nil {
		return nil, err
	}
	ephemeralPublic := ephemeral.PublicKey().Bytes()
	nonce := sealNonce(ephemeralPublic, recipientPublic)
	out := make([]byte, 0, box.AnonymousOverhead+len(message))
	return box.SealAfterPrecomputation(append(out, ephemeralPublic...), message, &nonce, key), nil
}

// openBox opens a sealed box with the recipient's keys.
func openBox(sealed []byte, recipient *Keys) ([]byte, bool) {
	if len(sealed) < box.AnonymousOverhead {
		return nil, false
	}
	ephemeralPublic := sealed[:32]
	ephemeral, err := ecdh.X25519().NewPublicKey(ephemeralPublic)
	if err != nil {
		return nil, false
	}
	key, err := boxKey(recipient.x25519, ephemeral)
	if err != nil {
		return nil, false
	}
	nonce := sealNonce(ephemeralPublic, recipient.x25519.PublicKey().Bytes())
	return box.OpenAfterPrecomputation(nil, sealed[32:], &nonce, key)
}

// boxKey is box.Precompute's key: HSalsa20 of the X25519 shared secret
// under a zero nonce.
func boxKey(private *ecdh.PrivateKey, peer *ecdh.PublicKey) (*[32]byte, error) {
	shared, err := private.ECDH(peer)
	if err != nil {
		return nil, err
	}
	var key [32]byte
	copy(key[:], shared)
	var zeros [16]byte
	salsa.HSalsa20(&key, &zeros, &key, &salsa.Sigma)
	return &key, nil
}

// sealNonce is BLAKE2b-192 of the ephemeral and the recipient public keys.
func sealNonce(ephemeralPublic, recipientPublic []byte) [24]byte {
	h, _ := blake2b.New(24, nil) // 24 is a valid size and there is no key: never fails
	h.Write(ephemeralPublic)
	h.Write(recipientPublic)
	var nonce [24]byte
	h.Sum(nonce[:0])
	return nonce
}
