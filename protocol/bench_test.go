package protocol

import (
	"crypto/rand"
	"sync"
	"testing"
)

// The benchmarks measure the request path at its worst: an envelope at the
// protocol's ceiling, whose ciphertext (base64url, as Seal writes it) is
// nearly all of the body. Run with
//
//	go test -run '^$' -bench . -benchmem ./protocol/

var (
	bigOnce     sync.Once
	bigEnvelope SealedEnvelope
	bigResult   []byte // a ResultRequest body
)

func bigBodies(b *testing.B) (SealedEnvelope, []byte) {
	b.Helper()
	bigOnce.Do(func() {
		// Room for the other members, so EnvelopeBytes stays under the cap.
		raw := make([]byte, (MaxEnvelopeBytes-200)*3/4)
		if _, err := rand.Read(raw); err != nil {
			panic(err)
		}
		bigEnvelope = SealedEnvelope{
			Ciphertext:     B64(raw),
			RecipientKeyID: "BYOLLM-RECIPIENT",
			SenderKeyID:    "BYOLLM-SENDER",
			Direction:      DirectionResult,
			DeadlineAt:     1800003600000,
		}
		body, err := Encode(ResultRequest{
			ProtocolVersion: ProtocolVersion,
			RunnerID:        "runner-1",
			JobID:           "job_1",
			LeaseID:         "lease_1",
			Envelope:        bigEnvelope,
			Disposition:     "ok",
		})
		if err != nil {
			panic(err)
		}
		bigResult = body
	})
	if EnvelopeBytes(bigEnvelope) > MaxEnvelopeBytes {
		b.Fatalf("benchmark envelope is over the cap: %d", EnvelopeBytes(bigEnvelope))
	}
	return bigEnvelope, bigResult
}

func BenchmarkCheckVersion6MiB(b *testing.B) {
	_, body := bigBodies(b)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for range b.N {
		if refusal := CheckVersion(body, nil); refusal != nil {
			b.Fatal(refusal.Message)
		}
	}
}

func BenchmarkDecodeResult6MiB(b *testing.B) {
	_, body := bigBodies(b)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for range b.N {
		var req ResultRequest
		if err := DecodeStrict(body, &req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeFetchResponse6MiB(b *testing.B) {
	env, _ := bigBodies(b)
	b.SetBytes(int64(len(env.Ciphertext)))
	b.ResetTimer()
	for range b.N {
		if _, err := Encode(FetchResponse{Envelope: env}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEnvelopeBytes6MiB(b *testing.B) {
	env, _ := bigBodies(b)
	b.SetBytes(int64(len(env.Ciphertext)))
	b.ResetTimer()
	for range b.N {
		if err := CheckEnvelopeSize(env); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBodyText6MiB(b *testing.B) {
	_, body := bigBodies(b)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for range b.N {
		BodyText(body)
	}
}

// BenchmarkResultPath6MiB is a result body read by the raw calls: the
// handshake, then the strict decode (a second parse), then the size rail.
func BenchmarkResultPath6MiB(b *testing.B) {
	_, body := bigBodies(b)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for range b.N {
		if refusal := Handshake(body, nil); refusal != nil {
			b.Fatal(refusal.Message)
		}
		var req ResultRequest
		if err := DecodeStrict(body, &req); err != nil {
			b.Fatal(err)
		}
		if err := CheckEnvelopeSize(req.Envelope); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResultPathParsedOnce6MiB is the same path on one ParseBody, as
// the relay reads it.
func BenchmarkResultPathParsedOnce6MiB(b *testing.B) {
	_, raw := bigBodies(b)
	b.SetBytes(int64(len(raw)))
	b.ResetTimer()
	for range b.N {
		body := ParseBody(raw)
		if refusal := body.Handshake(nil); refusal != nil {
			b.Fatal(refusal.Message)
		}
		var req ResultRequest
		if err := body.Decode(&req); err != nil {
			b.Fatal(err)
		}
		if err := CheckEnvelopeSize(req.Envelope); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeClaimResponse is the common case: a small answer of
// nested structs, the relay's most frequent encode.
func BenchmarkEncodeClaimResponse(b *testing.B) {
	stub := ClaimedStub{ID: "job_1", Kind: "llm.generate", Owner: "owner-1", Site: "BYOLLM-SITE", Audience: "aud",
		SizeClass: "s", DeadlineAt: 1800003600000, Lease: Lease{ID: "lease_1", ExpiresAt: 1800000030000}}
	resp := ClaimResponse{Jobs: []ClaimedStub{stub, stub}, LeaseMs: 30000}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := MarshalJS(resp); err != nil {
			b.Fatal(err)
		}
	}
}
