package protocol

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// The wire carries keys, signatures and ciphertext as base64url without
// padding (Node's Buffer "base64url" encoding).

// B64 encodes bytes as unpadded base64url.
func B64(b []byte) string {
	return base64.RawURLEncoding.EncodeToString(b)
}

// UnB64 decodes unpadded base64url strictly: no padding, no standard-
// alphabet characters, no whitespace, and no non-zero trailing bits. Node's
// decoder is lenient about all of these; being strict here means a value we
// accept re-encodes to the exact text that was signed.
func UnB64(s string) ([]byte, error) {
	// Go's decoder skips \r and \n anywhere; the text must be exactly
	// what was signed, so they are refused here.
	if strings.ContainsAny(s, "\r\n") {
		return nil, errors.New("not unpadded base64url: contains a line break")
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("not unpadded base64url: %w", err)
	}
	return b, nil
}

// UnB64Len decodes like UnB64 and requires exactly n bytes, for fixed-size
// keys and signatures.
func UnB64Len(s string, n int) ([]byte, error) {
	b, err := UnB64(s)
	if err != nil {
		return nil, err
	}
	if len(b) != n {
		return nil, fmt.Errorf("base64url value is %d bytes, want %d", len(b), n)
	}
	return b, nil
}
