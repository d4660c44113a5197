package protocol

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// EnvelopeBodyVersion is the domain tag at the head of every signed
// envelope body.
const EnvelopeBodyVersion = "byollm/v1/envelope"

// EnvelopeMaxAgeMs is how long a sealed payload is worth keeping from
// creation: the deadlineAt a payload is
// sealed with is its job's creation time plus this. It is bound into the
// signature, not enforced by Open, exactly as the reference does.
const EnvelopeMaxAgeMs = 24 * 60 * 60_000

// EnvelopeContext is everything an envelope's signature covers besides the
// plaintext.
type EnvelopeContext struct {
	JobID          string
	SenderKeyID    string
	RecipientKeyID string
	DeadlineAt     int64
	Direction      string // DirectionPayload or DirectionResult
}

// ExpectedEnvelope is what the opener expects: the context minus
// deadlineAt, which is read from the envelope and checked against the
// signature.
type ExpectedEnvelope struct {
	JobID          string
	SenderKeyID    string
	RecipientKeyID string
	Direction      string
}

// envelopeBody is the signed JSON. Field order is part of the format:
// JSON.stringify emits keys in insertion order and the verifier hashes
// bytes, so these fields are written out in the reference's order.
type envelopeBody struct {
	V              string `json:"v"`
	JobID          string `json:"jobId"`
	SenderKeyID    string `json:"senderKeyId"`
	RecipientKeyID string `json:"recipientKeyId"`
	DeadlineAt     int64  `json:"deadlineAt"`
	Direction      string `json:"direction"`
	Plaintext      string `json:"plaintext"`
}

// envelopeInner is what travels inside the sealed box.
type envelopeInner struct {
	Body      string `json:"body"`
	Signature string `json:"signature"`
}

// EnvelopeSignedBody is the exact bytes an envelope's signature covers,
// JSON.stringify-compatible.
func EnvelopeSignedBody(ctx EnvelopeContext, plaintext string) ([]byte, error) {
	return MarshalJS(envelopeBody{
		V:              EnvelopeBodyVersion,
		JobID:          ctx.JobID,
		SenderKeyID:    ctx.SenderKeyID,
		RecipientKeyID: ctx.RecipientKeyID,
		DeadlineAt:     ctx.DeadlineAt,
		Direction:      ctx.Direction,
		Plaintext:      plaintext,
	})
}

// Seal signs plaintext with the sender's identity key, then seals it to the
// recipient's X25519 encryption key with a libsodium sealed box.
// Sign-then-seal: the signature lives inside the
// ciphertext, so a relay never accumulates a non-repudiable record of who
// sent what to whom. ctx.SenderKeyID must be sender's key id.
func Seal(plaintext string, sender *Keys, recipientEncryptionPublic string, ctx EnvelopeContext) (SealedEnvelope, error) {
	return sealWith(rand.Reader, plaintext, sender, recipientEncryptionPublic, ctx)
}

// sealWith is Seal with the ephemeral key drawn from random, which the
// vector test feeds a fixed key to reproduce the reference's bytes. One
// code path for both, so the test covers what production runs.
func sealWith(random io.Reader, plaintext string, sender *Keys, recipientEncryptionPublic string, ctx EnvelopeContext) (SealedEnvelope, error) {
	if ctx.Direction != DirectionPayload && ctx.Direction != DirectionResult {
		return SealedEnvelope{}, fmt.Errorf("seal: direction %q is not payload or result", ctx.Direction)
	}
	rpk, err := UnB64Len(recipientEncryptionPublic, 32)
	if err != nil {
		return SealedEnvelope{}, fmt.Errorf("seal: recipient encryption key: %w", err)
	}
	body, err := EnvelopeSignedBody(ctx, plaintext)
	if err != nil {
		return SealedEnvelope{}, fmt.Errorf("seal: body: %w", err)
	}
	inner, err := MarshalJS(envelopeInner{Body: B64(body), Signature: sender.Sign(body)})
	if err != nil {
		return SealedEnvelope{}, fmt.Errorf("seal: inner: %w", err)
	}
	sealed, err := sealBox(random, inner, rpk)
	if err != nil {
		return SealedEnvelope{}, fmt.Errorf("seal: %w", err)
	}
	return SealedEnvelope{
		Ciphertext:     B64(sealed),
		RecipientKeyID: ctx.RecipientKeyID,
		SenderKeyID:    ctx.SenderKeyID,
		Direction:      ctx.Direction,
		DeadlineAt:     ctx.DeadlineAt,
	}, nil
}

// EnvelopeFailure is why an envelope was refused. Never told to a remote
// caller: which check failed is not something the sender is entitled to learn.
type EnvelopeFailure string

const (
	EnvelopeNotForUs        EnvelopeFailure = "not-for-us"
	EnvelopeUnopenable      EnvelopeFailure = "unopenable"
	EnvelopeMalformed       EnvelopeFailure = "malformed"
	EnvelopeBadSignature    EnvelopeFailure = "bad-signature"
	EnvelopeContextMismatch EnvelopeFailure = "context-mismatch"
)

func (f EnvelopeFailure) Error() string { return "protocol: envelope refused: " + string(f) }

// Open opens an envelope and verifies it came from the pinned sender,
// returning the plaintext or an EnvelopeFailure. Checks,
// in the reference's order:
//
//  1. not-for-us: the outer recipientKeyId, senderKeyId and direction equal
//     the expected ones (before any crypto);
//  2. unopenable: the sealed box does not open with recipient's key;
//  3. malformed: the inner is not {body: base64url string, signature: string};
//  4. bad-signature: body does not verify against senderIdentityPublic, the
//     pinned key (never a key named by the envelope: any holder of a public
//     key can make a box that opens, and a relay holds them all);
//  5. context-mismatch: the signed jobId, senderKeyId, recipientKeyId and
//     direction differ from expected, or the signed deadlineAt from the
//     envelope's (so a changed deadline fails);
//  6. malformed: the signed plaintext is not a string.
//
// Like the reference it does not check deadlineAt against a clock or the
// body's "v" tag.
func Open(env SealedEnvelope, recipient *Keys, senderIdentityPublic string, expected ExpectedEnvelope) (string, error) {
	if env.RecipientKeyID != expected.RecipientKeyID ||
		env.SenderKeyID != expected.SenderKeyID ||
		env.Direction != expected.Direction {
		return "", EnvelopeNotForUs
	}

	sealed, err := UnB64(env.Ciphertext)
	if err != nil {
		return "", EnvelopeUnopenable
	}
	opened, ok := openBox(sealed, recipient)
	if !ok {
		return "", EnvelopeUnopenable
	}

	body, signature, ok := decodeEnvelopeInner(opened)
	if !ok {
		return "", EnvelopeMalformed
	}
	if !verifyWith(senderIdentityPublic, body, signature) {
		return "", EnvelopeBadSignature
	}

	// TextDecoder (which the reference decodes the body with) drops a
	// leading BOM; JSON.parse would then accept what follows.
	claims, ok := parseClaims(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")))
	if !ok {
		return "", EnvelopeMalformed
	}
	if !claims.stringIs("jobId", expected.JobID) ||
		!claims.stringIs("senderKeyId", expected.SenderKeyID) ||
		!claims.stringIs("recipientKeyId", expected.RecipientKeyID) ||
		!claims.numberIs("deadlineAt", env.DeadlineAt) ||
		!claims.stringIs("direction", expected.Direction) {
		return "", EnvelopeContextMismatch
	}
	plaintext, ok := claims.string("plaintext")
	if !ok {
		return "", EnvelopeMalformed
	}
	return plaintext, nil
}

// decodeEnvelopeInner reads {body, signature}. Members are looked up by exact
// name: encoding/json would match "BODY" to a Body field, which JSON.parse
// never does.
func decodeEnvelopeInner(opened []byte) (body []byte, signature string, ok bool) {
	inner, ok := parseClaims(opened)
	if !ok {
		return nil, "", false
	}
	bodyText, ok := inner.string("body")
	if !ok {
		return nil, "", false
	}
	signature, ok = inner.string("signature")
	if !ok {
		return nil, "", false
	}
	body, err := UnB64(bodyText)
	if err != nil {
		return nil, "", false
	}
	return body, signature, true
}

// jsonObject is a parsed JSON value read the way the reference reads one:
// property lookups on whatever JSON.parse returned. A non-object has no
// properties, so every lookup on it fails.
type jsonObject map[string]json.RawMessage

// parseClaims parses any JSON value. ok is false only for text that is not
// JSON at all, or for null (the reference throws on a property of null).
func parseClaims(text []byte) (jsonObject, bool) {
	var v json.RawMessage
	if err := json.Unmarshal(text, &v); err != nil {
		return nil, false
	}
	trimmed := bytes.TrimSpace(v)
	if bytes.Equal(trimmed, []byte("null")) {
		return nil, false
	}
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return jsonObject{}, true
	}
	var obj jsonObject
	if err := json.Unmarshal(trimmed, &obj); err != nil {
		return nil, false
	}
	return obj, true
}

// string is the member as a string, if it is one.
func (o jsonObject) string(name string) (string, bool) {
	raw, present := o[name]
	if !present || len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// stringIs is the reference's claims[name] === want.
func (o jsonObject) stringIs(name, want string) bool {
	s, ok := o.string(name)
	return ok && s == want
}

// numberIs is claims[name] === want for a number: JSON.parse reads
// 1800086400000, 1800086400000.0 and 1.8000864e12 as the same number, so
// they are compared as float64 (exact for any safe integer).
func (o jsonObject) numberIs(name string, want int64) bool {
	raw, present := o[name]
	if !present || len(raw) == 0 || !(raw[0] == '-' || isDigit(raw[0])) {
		return false
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	return err == nil && f == float64(want)
}
