package protocol

import (
	"strings"
	"testing"
)

// The fast paths against the reference itself: long strings holding every
// byte the encoder treats specially, at every offset of an eight-byte
// block, go through zod's SealedEnvelope and JSON.stringify and must come
// back as Go writes them; and the shallow handshake parse must read the
// same protocolVersion as checkProtocolVersion on bodies built to confuse
// it.
func TestInteropFastPathsMatchTheReference(t *testing.T) {
	var cases []wireJSCase
	var want []string
	for _, s := range stringCases() {
		if !validUTF8ForJS(s) {
			continue // a JS string cannot hold it; the Go-side reference test covers it
		}
		env := SealedEnvelope{Ciphertext: "c" + s, RecipientKeyID: "BYOLLM-A", SenderKeyID: "BYOLLM-B", Direction: DirectionResult, DeadlineAt: 1800003600000}
		b := mustEncode(t, &env)
		cases = append(cases, wireJSCase{Schema: "SealedEnvelope", Body: b})
		want = append(want, b)
	}
	versions := []string{
		`{"protocolVersion":"2","protocolVersion":"1"}`,
		`{"protocolVersion":"1","protocolVersion":"2"}`,
		`{"x":{"protocolVersion":"2"},"protocolVersion":"3"}`,
		`{"protocol\u0056ersion":"0"}`,
		`{"protocolVersion":"\u0033"}`,
		`{"a":[` + strings.Repeat(`{"protocolVersion":"2"},`, 100) + `1],"protocolVersion":"9"}`,
		`{"protocolVersion":["2"]}`,
		`{"protocolVersion":""}`,
	}
	for _, b := range versions {
		cases = append(cases, wireJSCase{Fn: "checkProtocolVersion", Body: b})
		want = append(want, mustEncode(t, CheckVersion([]byte(b), nil)))
	}
	results := runWireReference(t, cases)
	for i, r := range results {
		if !r.OK {
			t.Fatalf("the reference refused %.200s: %s", cases[i].Body, r.Why)
		}
		if r.JSON != want[i] {
			t.Errorf("%.200s:\n go   %.300s\n node %.300s", cases[i].Body, want[i], r.JSON)
		}
	}
}

// validUTF8ForJS: the string survives a round trip through a JS string.
func validUTF8ForJS(s string) bool {
	return strings.ToValidUTF8(s, "\uFFFD") == s
}
