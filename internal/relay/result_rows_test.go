package relay

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/protocol"
)

// The cache answers what encoding every row afresh would: a row that
// changed under the same job id (another envelope, another device) is
// encoded again, never served from the cache; a row no longer listed
// leaves it; and past its byte budget the rows are still answered, just
// not kept.
func TestResultRowsAnswerWhatEncodingAfreshWould(t *testing.T) {
	var c resultRows
	env := func(ct string) *protocol.SealedEnvelope {
		return &protocol.SealedEnvelope{Ciphertext: ct, RecipientKeyID: "r", SenderKeyID: "s", Direction: "result", DeadlineAt: 1}
	}
	check := func(rows []protocol.SiteResult) {
		t.Helper()
		got, err := c.encode("site", rows)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(rows) {
			t.Fatalf("%d rows encoded, want %d", len(got), len(rows))
		}
		for i, row := range rows {
			want, err := protocol.MarshalJS(row)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[i], want) {
				t.Fatalf("row %d = %s, want %s", i, got[i], want)
			}
		}
	}
	a := protocol.SiteResult{JobID: "a", Envelope: env("one"), LeaseID: "l1", Device: &protocol.PublicIdentity{Identity: "d1"}}
	b := protocol.SiteResult{JobID: "b", Envelope: env("two"), Disposition: "ok"}
	check([]protocol.SiteResult{a, b})
	check([]protocol.SiteResult{a, b}) // from the cache

	changed := a
	changed.Envelope = env("one, sealed again")
	check([]protocol.SiteResult{changed, b})
	changed.Device = &protocol.PublicIdentity{Identity: "d2"}
	check([]protocol.SiteResult{changed, b})
	changed.LeaseID = "l2"
	check([]protocol.SiteResult{changed, b})

	check([]protocol.SiteResult{b})
	if _, kept := c.sites["site"].rows["a"]; kept {
		t.Fatal("a row no longer listed is still cached")
	}
	if c.bytes != c.sites["site"].bytes || c.bytes != len(`{"jobId":"b","envelope":{"ciphertext":"two","recipientKeyId":"r","senderKeyId":"s","direction":"result","deadlineAt":1},"disposition":"ok"}`) {
		t.Fatalf("cache holds %d bytes (site %d) for one row", c.bytes, c.sites["site"].bytes)
	}

	huge := protocol.SiteResult{JobID: "huge", Envelope: env(strings.Repeat("x", maxCachedRowBytes))}
	check([]protocol.SiteResult{huge, b})
	if _, kept := c.sites["site"]; kept || c.bytes != 0 {
		t.Fatalf("rows past the budget were kept (%d bytes)", c.bytes)
	}
	check([]protocol.SiteResult{b})
}

// sameResult names SiteResult's fields one by one; a field added to the
// wire type and not to sameResult would let a changed row be served from
// the cache, so adding one fails here until sameResult compares it too.
func TestSameResultComparesEveryFieldOfSiteResult(t *testing.T) {
	if n := reflect.TypeFor[protocol.SiteResult]().NumField(); n != 7 {
		t.Fatalf("protocol.SiteResult has %d fields; sameResult compares 7: compare the new ones, then update this count", n)
	}
}
