package protocol

import (
	"encoding/hex"
	"testing"
)

// Expectations are Node 20's `new TextDecoder().decode(bytes)`, re-encoded
// as UTF-8: what `request.text()` hands the reference relay.
func TestBodyTextDecodesAsWHATWG(t *testing.T) {
	cases := []struct{ in, want string }{
		{"efbbbf7b7d", "7b7d"},
		{"e282", "efbfbd"},
		{"e28241", "efbfbd41"},
		{"f09f98", "efbfbd"},
		{"ff41", "efbfbd41"},
		{"eda080", "efbfbdefbfbdefbfbd"},
		{"c0af", "efbfbdefbfbd"},
		{"f4908080", "efbfbdefbfbdefbfbdefbfbd"},
		{"e0a0", "efbfbd"},
		{"e0a080", "e0a080"},
		{"6162", "6162"},
	}
	for _, tc := range cases {
		in, _ := hex.DecodeString(tc.in)
		if got := hex.EncodeToString(BodyText(in)); got != tc.want {
			t.Errorf("BodyText(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestDecodeStrictReadsABodyWithABOM(t *testing.T) {
	var r FetchRequest
	in := "\xEF\xBB\xBF" + `{"protocolVersion":"2","runnerId":"r","jobId":"j","leaseId":"l"}`
	if err := DecodeStrict([]byte(in), &r); err != nil {
		t.Fatal(err)
	}
	if CheckVersion([]byte(in), nil) != nil {
		t.Fatal("the version behind a BOM was not read")
	}
}
