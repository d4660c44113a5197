package protocol

import (
	"bytes"
	"crypto/sha256"
	"testing"

	"golang.org/x/crypto/nacl/box"
)

// sealBox makes the bytes nacl/box's SealAnonymous makes from the same
// ephemeral key, and each opens what the other sealed.
func TestSealBoxIsSealAnonymous(t *testing.T) {
	recipient := fuzzKeys(t, "sealbox-recipient")
	for i, message := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte("sealed "), 300)} {
		ephemeral := sha256.Sum256([]byte{byte(i)})
		ours, err := sealBox(bytes.NewReader(ephemeral[:]), message, recipient.encryptionPublic()[:])
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := box.SealAnonymous(nil, message, recipient.encryptionPublic(), bytes.NewReader(ephemeral[:]))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ours, theirs) {
			t.Fatalf("message %d: sealBox and SealAnonymous differ", i)
		}
		if opened, ok := openBox(theirs, recipient); !ok || !bytes.Equal(opened, message) {
			t.Fatalf("message %d: openBox did not open SealAnonymous's box", i)
		}
		if opened, ok := box.OpenAnonymous(nil, ours, recipient.encryptionPublic(), &recipient.encryption); !ok || !bytes.Equal(opened, message) {
			t.Fatalf("message %d: OpenAnonymous did not open sealBox's box", i)
		}
		if _, ok := openBox(ours, fuzzKeys(t, "sealbox-other")); ok {
			t.Fatalf("message %d: opened by another recipient", i)
		}
	}
}

// A low-order public key makes an all-zero shared secret, a key anyone
// can compute: neither sealing to one nor opening a box made with one
// goes through (libsodium refuses both).
func TestSealBoxRefusesLowOrderKeys(t *testing.T) {
	var zero [32]byte
	ephemeral := sha256.Sum256([]byte("low-order"))
	if _, err := sealBox(bytes.NewReader(ephemeral[:]), []byte("x"), zero[:]); err == nil {
		t.Fatal("sealed to a low-order key")
	}
	recipient := fuzzKeys(t, "sealbox-recipient")
	forged := append(zero[:], make([]byte, box.Overhead+1)...)
	if _, ok := openBox(forged, recipient); ok {
		t.Fatal("opened a box from a low-order ephemeral key")
	}
}
