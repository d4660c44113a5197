package protocol

import (
	"regexp"
	"testing"
)

var keyIDPattern = regexp.MustCompile(`^BYOLLM(-[0-9A-HJKMNP-TV-Z]{4}){6}$`)

func TestKeyIDFormat(t *testing.T) {
	for range 20 {
		k := newTestKeys(t)
		if !keyIDPattern.MatchString(k.KeyID()) {
			t.Fatalf("key id %q does not match %s", k.KeyID(), keyIDPattern)
		}
		id, err := KeyID(k.Public().Identity)
		if err != nil || id != k.KeyID() {
			t.Fatalf("KeyID(public) = %q, %v; keys say %q", id, err, k.KeyID())
		}
	}
}

func TestKeyIDRefusesWhatIsNotAnIdentityKey(t *testing.T) {
	k := newTestKeys(t)
	id := k.Public().Identity
	for _, bad := range []string{"", "AAAA", id + "=", id + "A", id[:42], "+" + id[1:], id[:20] + " " + id[21:]} {
		if got, err := KeyID(bad); err == nil {
			t.Errorf("KeyID(%q) = %q, want an error", bad, got)
		}
	}
}

func TestVerifyPublicIdentity(t *testing.T) {
	a, b := newTestKeys(t), newTestKeys(t)
	if !VerifyPublicIdentity(a.Public()) {
		t.Fatal("a fresh identity does not verify")
	}
	for name, id := range map[string]PublicIdentity{
		"another party's encryption key": {Identity: a.Public().Identity, Encryption: b.Public().Encryption, EncryptionSig: a.Public().EncryptionSig},
		"another party's encryptionSig":  {Identity: a.Public().Identity, Encryption: a.Public().Encryption, EncryptionSig: b.Public().EncryptionSig},
		"another party's identity":       {Identity: b.Public().Identity, Encryption: a.Public().Encryption, EncryptionSig: a.Public().EncryptionSig},
		"a malformed identity":           {Identity: "x", Encryption: a.Public().Encryption, EncryptionSig: a.Public().EncryptionSig},
		"an empty identity":              {},
	} {
		if VerifyPublicIdentity(id) {
			t.Errorf("%s verified", name)
		}
	}
}

func TestStoredKeysRoundTripAndRefuseMismatches(t *testing.T) {
	k := newTestKeys(t)
	s := k.Stored(testNow)
	back, err := s.Keys()
	if err != nil || back.Public() != k.Public() {
		t.Fatalf("round trip: %v", err)
	}
	other := newTestKeys(t).Stored(testNow)
	for name, mutate := range map[string]func(*StoredKeys){
		"a version other than 1":            func(s *StoredKeys) { s.Version = 2 },
		"another identity private key":      func(s *StoredKeys) { s.IdentityPrivate = other.IdentityPrivate },
		"another encryption private key":    func(s *StoredKeys) { s.EncryptionPrivate = other.EncryptionPrivate },
		"an encryption key as the identity": func(s *StoredKeys) { s.IdentityPrivate = s.EncryptionPrivate },
		"another encryptionSig":             func(s *StoredKeys) { s.EncryptionSig = other.EncryptionSig },
		"private keys that are not base64":  func(s *StoredKeys) { s.IdentityPrivate = "!!" },
	} {
		m := s
		mutate(&m)
		if _, err := m.Keys(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
