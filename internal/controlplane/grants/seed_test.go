package grants_test

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/internal/controlplane/grants"
)

func TestASeedRoundTripsThroughItsStoredForm(t *testing.T) {
	seed, err := grants.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{
		grants.EncodeSeed(seed),
		grants.EncodeSeed(seed) + "\n",
		base64.RawURLEncoding.EncodeToString(seed),
	} {
		got, err := grants.ParseSeed(text)
		if err != nil || !bytes.Equal(got, seed) {
			t.Fatalf("ParseSeed(%q) = %x, %v", text, got, err)
		}
	}
}

func TestParseSeedRefusesWithoutQuotingTheValue(t *testing.T) {
	for _, text := range []string{"", "not base64 at all!", base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))} {
		_, err := grants.ParseSeed(text)
		if err == nil {
			t.Fatalf("ParseSeed(%q) accepted", text)
		}
		if text != "" && strings.Contains(err.Error(), text) {
			t.Fatalf("the error %q quotes the secret", err)
		}
	}
}

func TestTheLocalSeedFileIsMadeOnceOwnerOnlyAndReused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demo", "control-plane.key")
	first, err := grants.LoadOrCreateSeedFile(path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("the key file is %v, want owner-only", info.Mode().Perm())
	}
	again, err := grants.LoadOrCreateSeedFile(path)
	if err != nil || !bytes.Equal(first, again) {
		t.Fatal("a second start made a new key: every device paired before would refuse every grant")
	}
}

func TestTheSeedIsReadFromASecureStringParameter(t *testing.T) {
	seed, _ := grants.NewSeed()
	got, err := grants.SeedFromParameter("/byorelay/grant-key", "SecureString", grants.EncodeSeed(seed))
	if err != nil || !bytes.Equal(got, seed) {
		t.Fatalf("SeedFromParameter = %x, %v", got, err)
	}
}

func TestTheSeedIsRefusedFromAPlainParameterOrABadValue(t *testing.T) {
	seed, _ := grants.NewSeed()
	tests := []struct {
		name, paramType, value string
	}{
		{"a plain String parameter", "String", grants.EncodeSeed(seed)},
		{"a parameter with no value", "SecureString", ""},
		{"a value that is not a seed", "SecureString", "c2hvcnQ="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := grants.SeedFromParameter("/p", tt.paramType, tt.value); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
