package localtest

import (
	"crypto/rand"
	"encoding/hex"
)

// UniqueName is prefix and a random suffix, for a table or bucket: tests
// share one DynamoDB Local and one moto server, so each needs its own.
func UniqueName(prefix string) string {
	var b [6]byte
	rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return prefix + "-" + hex.EncodeToString(b[:])
}
