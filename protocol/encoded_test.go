package protocol

import (
	"bytes"
	"fmt"
	"testing"
)

// A results answer built from rows encoded one by one is byte for byte the
// answer encoded whole, with no rows, with rows of every shape (fields
// present and absent, text that needs escaping), and with and without
// eviction notices.
func TestEncodedRowsEncodeAsTheWholeAnswer(t *testing.T) {
	device := &PublicIdentity{Identity: "id\"ent", Encryption: "enc", EncryptionSig: "sig"}
	rows := []SiteResult{
		{JobID: "bare"},
		{JobID: "j\u2028\n1", Envelope: &SealedEnvelope{Ciphertext: "c2lnbmVk_-", RecipientKeyID: "r", SenderKeyID: "s", Direction: "result", DeadlineAt: 1764547200123},
			Disposition: "ok", RunnerID: "runner", LeaseID: "lease", Device: device, RunnerOwner: "owner <x>"},
		{JobID: "no-envelope", Disposition: "refused", Device: device},
	}
	for n := 0; n <= len(rows); n++ {
		for _, evicted := range [][]string{nil, {}, {"gone", "also\tgone"}} {
			t.Run(fmt.Sprintf("%d rows, evicted %v", n, evicted), func(t *testing.T) {
				encoded := make([]Encoded, 0, n)
				for _, r := range rows[:n] {
					b, err := MarshalJS(r)
					if err != nil {
						t.Fatal(err)
					}
					encoded = append(encoded, b)
				}
				same := func(whole, parts any) {
					t.Helper()
					want, err := Encode(whole)
					if err != nil {
						t.Fatal(err)
					}
					got, err := Encode(parts)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("encoded rows give\n%s\nthe whole answer is\n%s", got, want)
					}
				}
				same(SiteResultsResponse{Jobs: append([]SiteResult{}, rows[:n]...)}, EncodedResults{Jobs: encoded})
				same(CollectResponse{Jobs: append([]SiteResult{}, rows[:n]...), Evicted: evicted}, EncodedCollect{Jobs: encoded, Evicted: evicted})
			})
		}
	}
}
