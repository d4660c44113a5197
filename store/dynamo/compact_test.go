package dynamo

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/protocol"
)

// TestPackedEnvelopesAndIdentitiesReadBackExactly: what is packed reads
// back byte for byte, and text that would not (padded, standard alphabet,
// non-canonical trailing bits, not base64 at all, keys of other lengths) is
// kept as JSON, so it reads back exactly too.
func TestPackedEnvelopesAndIdentitiesReadBackExactly(t *testing.T) {
	raw := make([]byte, 850)
	for i := range raw {
		raw[i] = byte(i * 7)
	}
	canonical := base64.RawURLEncoding.EncodeToString(raw)
	for _, tc := range []struct {
		name       string
		ciphertext string
		packs      bool
	}{
		{"canonical", canonical, true},
		{"padded", base64.URLEncoding.EncodeToString(raw[:10]), false},
		{"standard alphabet", base64.StdEncoding.EncodeToString([]byte{0xfb, 0xff, 0xfe}), false},
		{"non-canonical trailing bits", "AB", false},
		{"not base64", "not base64!", false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := protocol.SealedEnvelope{Ciphertext: tc.ciphertext, RecipientKeyID: "BYOLLM-A", SenderKeyID: "BYOLLM-B", Direction: "result", DeadlineAt: 1796132527840}
			body, b, err := packEnvelope(e)
			if err != nil {
				t.Fatal(err)
			}
			if (b != nil) != tc.packs {
				t.Fatalf("packed %v, want %v", b != nil, tc.packs)
			}
			if tc.packs && strings.Contains(body, tc.ciphertext) {
				t.Fatal("the packed JSON still holds the ciphertext")
			}
			back, err := unpackEnvelope(body, b)
			if err != nil {
				t.Fatal(err)
			}
			if *back != e {
				t.Fatalf("read back %+v, wrote %+v", back, e)
			}
		})
	}
	// An envelope stored whole (before packing existed) still reads.
	if e, err := unpackEnvelope(`{"ciphertext":"abc","recipientKeyId":"r","senderKeyId":"s","direction":"payload","deadlineAt":5}`, nil); err != nil || e.Ciphertext != "abc" || e.DeadlineAt != 5 {
		t.Fatalf("whole JSON: %+v %v", e, err)
	}

	key := func(n int) string { return base64.RawURLEncoding.EncodeToString(raw[:n]) }
	d := protocol.PublicIdentity{Identity: key(32), Encryption: key(32), EncryptionSig: key(64)}
	packed := packIdentity(d)
	if len(packed) != 128 {
		t.Fatalf("packed identity of %d bytes", len(packed))
	}
	if back, err := unpackIdentity(packed); err != nil || back != d {
		t.Fatalf("identity read back %+v %v, wrote %+v", back, err, d)
	}
	for _, odd := range []protocol.PublicIdentity{
		{Identity: key(33), Encryption: key(32), EncryptionSig: key(64)},
		{Identity: key(32), Encryption: "id-runner", EncryptionSig: key(64)},
		{Identity: key(32), Encryption: key(32), EncryptionSig: base64.URLEncoding.EncodeToString(raw[:64])},
	} {
		if packIdentity(odd) != nil {
			t.Fatalf("%+v packed; it would not read back exactly", odd)
		}
	}
}
