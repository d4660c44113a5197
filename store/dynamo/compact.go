package dynamo

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/byorelay/byorelay/protocol"
)

// Envelopes and device identities are mostly base64url text, which DynamoDB
// bills byte for byte: a third more than the bytes it encodes. Written as
// bytes (a B attribute) they cost a quarter less, which for a small job is
// what keeps the finished job item under 2 KB (a write unit fewer on the
// result, docs/cost.md). Only text that decodes and encodes back to exactly
// itself is packed, so what a read returns is byte for byte what was
// written; anything else is stored as JSON, as before.

// packedEnvelope is an envelope's fields beside its ciphertext, under
// short names (attribute and field names are billed too).
type packedEnvelope struct {
	Recipient string `json:"r"`
	Sender    string `json:"s"`
	Direction string `json:"d"`
	Deadline  int64  `json:"t"`
}

// packEnvelope is e as stored: JSON of the fields beside the ciphertext and
// the ciphertext's bytes, or, if the ciphertext is not canonical unpadded
// base64url, e's whole JSON and no bytes.
func packEnvelope(e protocol.SealedEnvelope) (string, []byte, error) {
	if raw, ok := canonicalBase64(e.Ciphertext); ok {
		body, err := json.Marshal(packedEnvelope{e.RecipientKeyID, e.SenderKeyID, e.Direction, e.DeadlineAt})
		if err != nil {
			return "", nil, fmt.Errorf("encode envelope: %w", err)
		}
		return string(body), raw, nil
	}
	body, err := json.Marshal(e)
	if err != nil {
		return "", nil, fmt.Errorf("encode envelope: %w", err)
	}
	return string(body), nil, nil
}

// unpackEnvelope is packEnvelope read back.
func unpackEnvelope(body string, raw []byte) (*protocol.SealedEnvelope, error) {
	if len(raw) == 0 {
		var e protocol.SealedEnvelope
		if err := json.Unmarshal([]byte(body), &e); err != nil {
			return nil, fmt.Errorf("decode stored envelope: %w", err)
		}
		return &e, nil
	}
	var p packedEnvelope
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		return nil, fmt.Errorf("decode stored envelope: %w", err)
	}
	return &protocol.SealedEnvelope{
		Ciphertext: base64.RawURLEncoding.EncodeToString(raw), RecipientKeyID: p.Recipient,
		SenderKeyID: p.Sender, Direction: p.Direction, DeadlineAt: p.Deadline,
	}, nil
}

// Sizes of a device identity's keys and signature as bytes (X25519 and
// Ed25519 keys, an Ed25519 signature).
const (
	identityKeyBytes = 32
	identitySigBytes = 64
)

// packIdentity is a device identity as 128 bytes (identity key, encryption
// key, signature), or nil when any part is not canonical unpadded base64url
// of the expected length.
func packIdentity(d protocol.PublicIdentity) []byte {
	id, ok1 := canonicalBase64(d.Identity)
	enc, ok2 := canonicalBase64(d.Encryption)
	sig, ok3 := canonicalBase64(d.EncryptionSig)
	if !ok1 || !ok2 || !ok3 || len(id) != identityKeyBytes || len(enc) != identityKeyBytes || len(sig) != identitySigBytes {
		return nil
	}
	return append(append(id, enc...), sig...)
}

// unpackIdentity is packIdentity read back.
func unpackIdentity(b []byte) (protocol.PublicIdentity, error) {
	if len(b) != 2*identityKeyBytes+identitySigBytes {
		return protocol.PublicIdentity{}, fmt.Errorf("packed device identity of %d bytes", len(b))
	}
	enc := base64.RawURLEncoding.EncodeToString
	return protocol.PublicIdentity{
		Identity:      enc(b[:identityKeyBytes]),
		Encryption:    enc(b[identityKeyBytes : 2*identityKeyBytes]),
		EncryptionSig: enc(b[2*identityKeyBytes:]),
	}, nil
}

// canonicalBase64 decodes unpadded base64url that encodes back to exactly s.
func canonicalBase64(s string) ([]byte, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(raw) == 0 || base64.RawURLEncoding.EncodeToString(raw) != s {
		return nil, false
	}
	return raw, true
}
