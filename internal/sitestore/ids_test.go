package sitestore

import (
	"strings"
	"testing"
)

func TestUserCodesAreTwoGroupsOfFour(t *testing.T) {
	seen := map[string]bool{}
	for range 500 {
		c := NewUserCode()
		if len(c) != 9 || c[4] != '-' {
			t.Fatalf("code %q is not XXXX-XXXX", c)
		}
		for _, r := range strings.ReplaceAll(c, "-", "") {
			if !strings.ContainsRune(userCodeAlphabet, r) {
				t.Fatalf("code %q has %q, outside the alphabet", c, r)
			}
		}
		seen[c] = true
	}
	if len(seen) < 495 {
		t.Fatalf("only %d distinct codes in 500", len(seen))
	}
}

func TestNormalizeUserCodeIsTheReferences(t *testing.T) {
	for in, want := range map[string]string{
		"abcd-efgh":    "ABCD-EFGH",
		" abcd efgh ":  "ABCD-EFGH",
		"ABCDEFGH":     "ABCD-EFGH",
		"ab.cd_ef*gh":  "ABCD-EFGH",
		"abc":          "ABC",
		"abcd-efgh-ij": "ABCDEFGHIJ",
	} {
		if got := NormalizeUserCode(in); got != want {
			t.Errorf("NormalizeUserCode(%q) = %q, want %q", in, got, want)
		}
	}
}
