package protocol

import (
	"bytes"
	"net/url"
	"testing"
)

// fuzzDecode checks a body type against arbitrary bytes: decoding never
// panics, and whatever decodes re-encodes to bytes that decode again to the
// same bytes (decode→encode→decode is stable). Seeds come from
// testdata/fuzz/<target> and from the bodies given here.
func fuzzDecode[T any, PT interface {
	*T
	Validator
}](f *testing.F, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var first T
		if DecodeStrict(data, PT(&first)) != nil {
			return
		}
		once, err := Encode(&first)
		if err != nil {
			t.Fatalf("accepted body does not encode: %v", err)
		}
		var second T
		if err := DecodeStrict(once, PT(&second)); err != nil {
			t.Fatalf("our own encoding is refused: %v\n%s", err, once)
		}
		twice, err := Encode(&second)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(once, twice) {
			t.Fatalf("unstable encoding\n once  %s\n twice %s", once, twice)
		}
	})
}

func FuzzDecodeClaimRequest(f *testing.F) {
	fuzzDecode[ClaimRequest](f, `{"protocolVersion":"2","runnerId":"r","capabilities":[`+wireCap+`],"max":4}`)
}

func FuzzDecodeFetchRequest(f *testing.F) {
	fuzzDecode[FetchRequest](f, `{"protocolVersion":"2","runnerId":"r","jobId":"j","leaseId":"l"}`)
}

func FuzzDecodeHeartbeatRequest(f *testing.F) {
	fuzzDecode[HeartbeatRequest](f, `{"protocolVersion":"2","runnerId":"r","daemonVersion":"0.1.1","capabilities":[],"activeLeases":[{"jobId":"j","leaseId":"l"}]}`)
}

func FuzzDecodeResultRequest(f *testing.F) {
	fuzzDecode[ResultRequest](f, `{"protocolVersion":"2","runnerId":"r","jobId":"j","leaseId":"l","envelope":`+wireEnvelope+`,"disposition":"ok"}`)
}

func FuzzDecodeReleaseRequest(f *testing.F) {
	fuzzDecode[ReleaseRequest](f, `{"protocolVersion":"2","runnerId":"r","leases":[{"jobId":"j","leaseId":"l"}],"reason":"pause"}`)
}

func FuzzDecodePairStartRequest(f *testing.F) {
	fuzzDecode[PairStartRequest](f, `{"protocolVersion":"2","action":"start","daemon":{"version":"0.1.1","label":"l","platform":"linux"},"device":`+wireIdentity+`,"capabilities":[]}`)
}

func FuzzDecodePairPollRequest(f *testing.F) {
	fuzzDecode[PairPollRequest](f, `{"protocolVersion":"2","action":"poll","deviceCode":"0123456789abcdefghij"}`)
}

func FuzzDecodeEnqueueRequest(f *testing.F) {
	fuzzDecode[EnqueueRequest](f, `{"protocolVersion":"2","siteId":"s","stub":`+wireStub+`}`)
}

func FuzzDecodePayloadRequest(f *testing.F) {
	fuzzDecode[PayloadRequest](f, `{"protocolVersion":"2","siteId":"s","jobId":"j","envelope":`+wireEnvelope+`}`)
}

func FuzzDecodeCancelRequest(f *testing.F) {
	fuzzDecode[CancelRequest](f, `{"protocolVersion":"2","siteId":"s","jobId":"j"}`)
}

// The handshake reads any bytes; it must never panic and must answer a
// valid WireError whenever it refuses.
func FuzzCheckVersion(f *testing.F) {
	for _, s := range []string{`{"protocolVersion":"2"}`, `{}`, `{"protocolVersion":"0"}`, `[1]`, `null`, `{"protocolVersion":{"a":1}}`,
		`{"protocolVersion":"2"} x`, "\xef\xbb\xbf{\"protocolVersion\":\"2\"}", "{\"protocolVersion\":\"2\xff\"}", `"2"`, `2`} {
		f.Add([]byte(s), "protocolVersion=2")
	}
	f.Fuzz(func(t *testing.T, body []byte, rawQuery string) {
		q, err := url.ParseQuery(rawQuery)
		if err != nil {
			return
		}
		if refusal := CheckVersion(body, q); refusal != nil {
			if err := refusal.Validate(); err != nil {
				t.Fatalf("refusal is not a valid WireError: %v", err)
			}
		}
	})
}
