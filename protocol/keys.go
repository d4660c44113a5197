package protocol

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"

	"golang.org/x/crypto/curve25519"
)

// EncryptionKeyContext is the domain separator of an encryptionSig, so a
// signature over an encryption key cannot be replayed as a signature over
// anything else.
const EncryptionKeyContext = "byollm/v1/encryption-key"

// Keys is one party's private keys: an Ed25519 identity key that signs and
// is pinned, and an X25519 encryption key that sealed envelopes are opened
// with. Every field is unexported and every printing or serialising path is
// refused or redacted, so private material cannot reach a log line or the
// wire by accident. A relay never holds one (RELAY_BLIND); sites, daemons,
// the control plane and tests do.
type Keys struct {
	identity   ed25519.PrivateKey
	encryption [32]byte // X25519 private scalar, as libsodium and Node hold it
	// x25519 is the same scalar as crypto/ecdh holds it, made once: each
	// envelope opened is then one scalar multiplication (openBox).
	x25519 *ecdh.PrivateKey
	public PublicIdentity
	keyID  string
}

// GenerateKeys makes a fresh pair of keypairs from crypto/rand and binds the
// encryption key to the identity with an encryptionSig.
func GenerateKeys() (*Keys, error) {
	_, identity, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate identity key: %w", err)
	}
	var encryption [32]byte
	if _, err := rand.Read(encryption[:]); err != nil {
		return nil, fmt.Errorf("generate encryption key: %w", err)
	}
	return NewKeys(identity.Seed(), encryption[:])
}

// NewKeys rebuilds keys from a 32-byte RFC 8032 Ed25519 seed and a 32-byte
// X25519 private scalar (unclamped; X25519 clamps), the two secrets a
// StoredKeys file holds.
func NewKeys(identitySeed, encryptionPrivate []byte) (*Keys, error) {
	if len(identitySeed) != ed25519.SeedSize {
		return nil, fmt.Errorf("identity seed is %d bytes, want %d", len(identitySeed), ed25519.SeedSize)
	}
	if len(encryptionPrivate) != curve25519.ScalarSize {
		return nil, fmt.Errorf("encryption key is %d bytes, want %d", len(encryptionPrivate), curve25519.ScalarSize)
	}
	k := &Keys{identity: ed25519.NewKeyFromSeed(identitySeed)}
	copy(k.encryption[:], encryptionPrivate)
	x, err := ecdh.X25519().NewPrivateKey(k.encryption[:])
	if err != nil {
		return nil, fmt.Errorf("derive encryption public key: %w", err)
	}
	k.x25519 = x
	encPub := x.PublicKey().Bytes()
	idPub := k.identity.Public().(ed25519.PublicKey)
	encryption := B64(encPub)
	k.public = PublicIdentity{
		Identity:      B64(idPub),
		Encryption:    encryption,
		EncryptionSig: k.Sign([]byte(EncryptionKeyContext + ":" + encryption)),
	}
	k.keyID = keyIDOfRaw(idPub)
	return k, nil
}

// Public is the public half, as it travels on the wire.
func (k *Keys) Public() PublicIdentity { return k.public }

// KeyID is the key id of the identity key.
func (k *Keys) KeyID() string { return k.keyID }

// Sign is a base64url Ed25519 signature by the identity key. Callers sign
// protocol statements through the typed helpers (SignRequest, SignGrant, Seal,
// ...), which build the exact bytes.
func (k *Keys) Sign(data []byte) string {
	return B64(ed25519.Sign(k.identity, data))
}

// encryptionPublic is the raw X25519 public key.
func (k *Keys) encryptionPublic() *[32]byte {
	return (*[32]byte)(k.x25519.PublicKey().Bytes())
}

// errKeysNotSerialisable is returned by every marshaller on Keys.
var errKeysNotSerialisable = errors.New("protocol: private keys are never serialised; use Public() or Stored()")

// MarshalJSON refuses: private keys never go on the wire.
func (Keys) MarshalJSON() ([]byte, error) { return nil, errKeysNotSerialisable }

// MarshalText refuses, for every text encoder (JSON map keys, YAML, ...).
func (Keys) MarshalText() ([]byte, error) { return nil, errKeysNotSerialisable }

// String names the keys by key id and nothing else.
func (k Keys) String() string { return "protocol.Keys{" + k.keyID + "}" }

// GoString keeps %#v from printing the private fields.
func (k Keys) GoString() string { return k.String() }

// Format redacts every fmt verb (%v, %+v, %x, ...), which otherwise print
// unexported fields, private key bytes included.
func (k Keys) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// LogValue keeps slog to the key id.
func (k Keys) LogValue() slog.Value { return slog.StringValue(k.String()) }

// VerifyPublicIdentity checks that the encryption key really belongs to the
// identity presenting it. Run it on every PublicIdentity received: pinning an
// identity protects nothing if an upstream can pair it with an encryption key
// of its own. Malformed input is false, never a panic.
func VerifyPublicIdentity(id PublicIdentity) bool {
	return verifyWith(id.Identity, []byte(EncryptionKeyContext+":"+id.Encryption), id.EncryptionSig)
}

// verifyWith verifies a base64url Ed25519 signature against a base64url
// identity key. Anything malformed is a failed
// verification: this runs on input from the network.
func verifyWith(identityPublic string, data []byte, signature string) bool {
	pub, err := UnB64Len(identityPublic, ed25519.PublicKeySize)
	if err != nil {
		return false
	}
	sig, err := UnB64Len(signature, ed25519.SignatureSize)
	if err != nil {
		return false
	}
	return ed25519.Verify(pub, data, sig)
}
