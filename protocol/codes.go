package protocol

import (
	"crypto/rand"
	"strings"
	"unicode"
)

// Device-code pairing codes, as the reference relay mints them.

// userCodeAlphabet is Crockford base32: no I, L, O or U, so a code read
// aloud or typed from a screen has no look-alike letters. Its 32 symbols
// divide 256, so `byte % 32` has no modulo bias.
const userCodeAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// Pairing constants of the reference relay.
const (
	// PairingCodeTTLMs is how long a started pairing may be approved.
	PairingCodeTTLMs = 10 * 60 * 1000
	// MaxOutstandingPairings bounds unapproved pairings held at once.
	MaxOutstandingPairings = 500
	// PairPollIntervalMs is the pollIntervalMs a start answers with.
	PairPollIntervalMs = 2_000
	// PairingBusyMessage is the rate-limited message when at capacity.
	PairingBusyMessage = "too many pairings are in progress right now — try again in a few minutes"
)

// NewUserCode is the code a person types: 8 symbols from the alphabet in
// two groups of four, "XXXX-XXXX".
func NewUserCode() string {
	var b [8]byte
	rand.Read(b[:]) // never fails since Go 1.24; it crashes instead
	out := make([]byte, 0, 9)
	for i, x := range b {
		if i == 4 {
			out = append(out, '-')
		}
		out = append(out, userCodeAlphabet[int(x)%len(userCodeAlphabet)])
	}
	return string(out)
}

// NewDeviceCode is the secret a daemon polls with: 32 random bytes as
// unpadded base64url (43 characters).
func NewDeviceCode() string {
	var b [32]byte
	rand.Read(b[:])
	return B64(b[:])
}

// NormalizeUserCode is how the reference looks a typed code up:
// surrounding whitespace trimmed, upper-cased.
func NormalizeUserCode(code string) string {
	return strings.ToUpper(strings.TrimFunc(code, unicode.IsSpace))
}
