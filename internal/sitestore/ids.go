package sitestore

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/byorelay/byorelay/internal/platform/ids"
)

// userCodeAlphabet is @byollm/server's: 27 symbols with no
// look-alikes (no 0/O, 1/I/L, 5/S, U/V). A direct site's codes are its own,
// distinct from a relay's.
const userCodeAlphabet = "ABCDEFGHJKMNPQRTWXYZ2346789"

// NewUserCode mints "XXXX-XXXX". Bytes at or above the largest multiple of
// 27 are discarded rather than folded, which would bias the low symbols.
func NewUserCode() string {
	limit := byte(256 - 256%len(userCodeAlphabet))
	out := make([]byte, 0, 9)
	var b [16]byte
	for len(out) < 9 {
		rand.Read(b[:])
		for _, x := range b {
			if x >= limit || len(out) == 9 {
				continue
			}
			if len(out) == 4 {
				out = append(out, '-')
			}
			out = append(out, userCodeAlphabet[int(x)%len(userCodeAlphabet)])
		}
	}
	return string(out)
}

// NormalizeUserCode is @byollm/server's code normalisation: upper-case, drop
// anything that is not a letter or digit, and re-insert the dash in an
// 8-symbol code, so "abcd efgh" and "ABCD-EFGH" name the same pairing.
func NormalizeUserCode(in string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(in) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		}
	}
	bare := b.String()
	if len(bare) == 8 {
		return bare[:4] + "-" + bare[4:]
	}
	return bare
}

// HashDeviceCode is what the store keeps instead of a device code.
func HashDeviceCode(deviceCode string) string {
	sum := sha256.Sum256([]byte(deviceCode))
	return hex.EncodeToString(sum[:])
}

// NewRunnerID is "runner_<uuid>".
func NewRunnerID() string { return "runner_" + ids.UUID() }

// NewID is a bare UUID: job ids and lease ids.
func NewID() string { return ids.UUID() }
