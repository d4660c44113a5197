package protocol

import (
	"regexp"
	"testing"
)

func TestNewUserCodeFormat(t *testing.T) {
	format := regexp.MustCompile(`^[0-9A-HJKMNP-TV-Z]{4}-[0-9A-HJKMNP-TV-Z]{4}$`)
	seen := map[string]bool{}
	used := map[rune]bool{}
	for range 2000 {
		c := NewUserCode()
		if !format.MatchString(c) {
			t.Fatalf("user code %q is not XXXX-XXXX in Crockford base32", c)
		}
		seen[c] = true
		for _, r := range c {
			used[r] = true
		}
	}
	// 2000 draws from 32^8 collide with probability ~2e-6.
	if len(seen) < 1999 {
		t.Fatalf("only %d distinct codes in 2000", len(seen))
	}
	// Every symbol of the alphabet (plus the dash) shows up in 16000 draws
	// unless the mapping skips some.
	if len(used) != 33 {
		t.Fatalf("%d distinct characters used, want 33", len(used))
	}
}

func TestNewDeviceCodeFormat(t *testing.T) {
	a, b := NewDeviceCode(), NewDeviceCode()
	if a == b {
		t.Fatal("two device codes are equal")
	}
	raw, err := UnB64Len(a, 32)
	if err != nil {
		t.Fatal(err)
	}
	if B64(raw) != a || len(a) != 43 {
		t.Fatalf("device code %q is not 32 bytes of unpadded base64url", a)
	}
	// A device code must satisfy PairPollRequest's min(20).
	if err := (PairPollRequest{ProtocolVersion: "2", Action: "poll", DeviceCode: a}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestNormalizeUserCode(t *testing.T) {
	if got := NormalizeUserCode("  abcd-efgh\n"); got != "ABCD-EFGH" {
		t.Fatalf("got %q", got)
	}
}
