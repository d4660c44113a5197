package grants

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// NewSeed makes a fresh 32-byte Ed25519 seed from crypto/rand.
func NewSeed() ([]byte, error) {
	seed := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return nil, fmt.Errorf("grants: %w", err)
	}
	return seed, nil
}

// EncodeSeed is the seed as it is stored: standard base64, what
// `openssl rand -base64 32` prints.
func EncodeSeed(seed []byte) string { return base64.StdEncoding.EncodeToString(seed) }

// ParseSeed reads a stored seed: base64 (standard or URL alphabet, padded
// or not) of exactly 32 bytes, surrounding white space ignored. The error
// never quotes the value: it is a secret.
func ParseSeed(text string) ([]byte, error) {
	text = strings.TrimSpace(text)
	for _, enc := range []*base64.Encoding{
		base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding,
	} {
		seed, err := enc.DecodeString(text)
		if err != nil {
			continue
		}
		if len(seed) != ed25519.SeedSize {
			return nil, fmt.Errorf("grants: the control-plane seed is %d bytes, want %d", len(seed), ed25519.SeedSize)
		}
		return seed, nil
	}
	return nil, errors.New("grants: the control-plane seed is not base64")
}

// LoadOrCreateSeedFile reads the seed at path, or writes a new one there
// (owner-only) when there is none: the local stack's key, kept in its
// git-ignored demo directory so daemons paired yesterday still verify
// today's grants. As localtest/demo does, the new file is written aside and
// linked into place, so two processes starting at once agree on one key.
func LoadOrCreateSeedFile(path string) ([]byte, error) {
	if seed, err := readSeedFile(path); !errors.Is(err, fs.ErrNotExist) {
		return seed, err
	}
	seed, err := NewSeed()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("grants: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".grant-key-*")
	if err != nil {
		return nil, fmt.Errorf("grants: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(EncodeSeed(seed) + "\n"); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("grants: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("grants: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("grants: %w", err)
	}
	return readSeedFile(path)
}

func readSeedFile(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	seed, err := ParseSeed(string(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return seed, nil
}
