package grants

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/byorelay/byorelay/protocol"
)

// MaxKMSMessage is the largest RAW message KMS signs. A grant statement is
// the protocol's identifiers in a JSON array, far below it for any id a
// site mints; one over it (ids near their byte bounds, escaped) is
// ErrStatementTooLarge here rather than a refusal after a round trip.
const MaxKMSMessage = 4096

// ErrStatementTooLarge is a statement KMS would not sign: the job cannot
// be granted through KMS at all, so retrying it cannot help.
var ErrStatementTooLarge = errors.New("grants: statement over KMS's 4096-byte message limit")

// KMSSigner signs with an AWS KMS asymmetric key of key spec
// ECC_NIST_EDWARDS25519: the private key never leaves KMS, so no function
// that signs can read it, and IAM says which functions may sign with it
// (kms:Sign) at all.
type KMSSigner struct {
	api    *kms.Client
	keyARN string
	public ed25519.PublicKey
	id     string // public in the protocol's form
}

// NewKMSSigner reads keyID's public key (GetPublicKey: one round trip, so
// a function calls it on its first request, not at init) and checks that
// the key signs pure Ed25519: a key of another spec or usage would sign
// grants no device accepts, so it is refused here, once, with the reason,
// rather than at every claim. keyID is a key id, key ARN, alias name or
// alias ARN; the signer then signs with the key ARN KMS answered, so an
// alias moved later cannot make a container sign with a key other than the
// one whose public half it hands out.
func NewKMSSigner(ctx context.Context, api *kms.Client, keyID string) (*KMSSigner, error) {
	if keyID == "" {
		return nil, errors.New("grants: no KMS key id")
	}
	out, err := api.GetPublicKey(ctx, &kms.GetPublicKeyInput{KeyId: aws.String(keyID)})
	if err != nil {
		return nil, fmt.Errorf("grants: KMS key %s: %w", keyID, err)
	}
	switch {
	case out.KeySpec != types.KeySpecEccNistEdwards25519:
		return nil, fmt.Errorf("grants: KMS key %s is %s, want %s (Ed25519: what devices verify)",
			keyID, out.KeySpec, types.KeySpecEccNistEdwards25519)
	case out.KeyUsage != types.KeyUsageTypeSignVerify:
		return nil, fmt.Errorf("grants: KMS key %s is for %s, want %s", keyID, out.KeyUsage, types.KeyUsageTypeSignVerify)
	case !slices.Contains(out.SigningAlgorithms, types.SigningAlgorithmSpecEd25519Sha512):
		return nil, fmt.Errorf("grants: KMS key %s does not sign %s", keyID, types.SigningAlgorithmSpecEd25519Sha512)
	case aws.ToString(out.KeyId) == "":
		return nil, fmt.Errorf("grants: KMS key %s: GetPublicKey named no key ARN", keyID)
	}
	parsed, err := x509.ParsePKIXPublicKey(out.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("grants: KMS key %s: public key: %w", keyID, err)
	}
	public, ok := parsed.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("grants: KMS key %s: public key is a %T, not Ed25519", keyID, parsed)
	}
	return &KMSSigner{api: api, keyARN: aws.ToString(out.KeyId), public: public, id: protocol.B64(public)}, nil
}

// Public is the KMS key's public key.
func (s *KMSSigner) Public() string { return s.id }

// KeyARN is the key the signer signs with.
func (s *KMSSigner) KeyARN() string { return s.keyARN }

// Sign asks KMS for a pure Ed25519 signature over message: ED25519_SHA_512
// on the RAW message (ED25519_PH_SHA_512 signs a digest, which no Ed25519
// verifier accepts). The signature is verified against the public key
// before it is returned (microseconds beside the round trip): a signature
// that does not verify is an error here, not a grant every device refuses.
// KMS's throttling is retried by the SDK's retryer; what still fails is
// the error.
func (s *KMSSigner) Sign(ctx context.Context, message []byte) ([]byte, error) {
	if len(message) > MaxKMSMessage {
		return nil, fmt.Errorf("%w: %d bytes", ErrStatementTooLarge, len(message))
	}
	out, err := s.api.Sign(ctx, &kms.SignInput{
		KeyId:            aws.String(s.keyARN),
		Message:          message,
		MessageType:      types.MessageTypeRaw,
		SigningAlgorithm: types.SigningAlgorithmSpecEd25519Sha512,
	})
	if err != nil {
		return nil, fmt.Errorf("kms sign: %w", err)
	}
	if len(out.Signature) != ed25519.SignatureSize || !ed25519.Verify(s.public, message, out.Signature) {
		return nil, fmt.Errorf("kms sign: key %s returned a signature that does not verify with its public key", s.keyARN)
	}
	return out.Signature, nil
}
