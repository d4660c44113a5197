package protocol

import (
	"bytes"
	"crypto/sha256"
	"testing"

	"golang.org/x/crypto/nacl/box"
)

// The fuzz targets hold one genuine artifact fixed and let the fuzzer change
// everything around it. Two properties: nothing panics, and nothing but the
// genuine artifact (or a byte-identical restatement of what was signed) is
// ever accepted.

// fuzzKeys are deterministic so the corpus stays meaningful across runs.
func fuzzKeys(tb testing.TB, name string) *Keys {
	tb.Helper()
	seed := sha256.Sum256([]byte("byorelay-fuzz/" + name + "/identity"))
	enc := sha256.Sum256([]byte("byorelay-fuzz/" + name + "/encryption"))
	k, err := NewKeys(seed[:], enc[:])
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

const fuzzRequestBody = `{"protocolVersion":"2","runnerId":"runner_1","capabilities":[],"max":4}`

func FuzzVerifyRequest(f *testing.F) {
	device := fuzzKeys(f, "device")
	genuine := SignRequest(device, "claim", "runner_1", testNow, []byte(fuzzRequestBody))
	genuineCanonical := CanonicalRequest("claim", "runner_1", testNow, []byte(fuzzRequestBody))
	siteGenuine := SignSiteRequest(device, "claim", "runner_1", testNow, []byte(fuzzRequestBody))
	siteCanonical := CanonicalRequest("site/claim", "runner_1", testNow, []byte(fuzzRequestBody))

	f.Add("claim", "runner_1", "1800000000000", genuine.Signature, []byte(fuzzRequestBody), int64(testNow))
	f.Add("claim", "runner_1", " 1.8e12 ", genuine.Signature, []byte(fuzzRequestBody), int64(testNow+MaxClockSkewMs))
	f.Add("claim", "runner_1", "1800000000000", genuine.Signature, []byte(fuzzRequestBody+" "), int64(testNow))
	f.Add("claim", "runner_1", "1800000000000", siteGenuine.Signature, []byte(fuzzRequestBody), int64(testNow))

	f.Fuzz(func(t *testing.T, endpoint, caller, issuedAt, signature string, body []byte, now int64) {
		sig, err := ParseSignature(caller, issuedAt, signature)
		if err != nil {
			return
		}
		// A request is accepted only for bytes the device actually signed:
		// the daemon request, or the site-plane request, whose canonical
		// string is "site/claim" and so also verifies where a caller passes
		// "site/claim" as a daemon endpoint (a last path segment never can).
		id := device.Public().Identity
		signed := func(canonical []byte) bool {
			return bytes.Equal(canonical, genuineCanonical) && sig.Signature == genuine.Signature ||
				bytes.Equal(canonical, siteCanonical) && sig.Signature == siteGenuine.Signature
		}
		if VerifyRequest(id, endpoint, body, sig, now) == nil && !signed(CanonicalRequest(endpoint, sig.CallerID, sig.IssuedAt, body)) {
			t.Fatalf("accepted a request that was never signed: %q %q %d %q", endpoint, sig.CallerID, sig.IssuedAt, body)
		}
		if VerifySiteRequest(id, endpoint, body, sig, now) == nil && !signed(CanonicalRequest("site/"+endpoint, sig.CallerID, sig.IssuedAt, body)) {
			t.Fatalf("site plane accepted a request that was never signed: %q %q %d %q", endpoint, sig.CallerID, sig.IssuedAt, body)
		}
	})
}

func FuzzOpenEnvelope(f *testing.F) {
	site, device := fuzzKeys(f, "site"), fuzzKeys(f, "device")
	ctx := EnvelopeContext{JobID: "job_1", SenderKeyID: site.KeyID(), RecipientKeyID: device.KeyID(), DeadlineAt: testNow + EnvelopeMaxAgeMs, Direction: DirectionPayload}
	const plaintext = `{"messages":[{"role":"user","content":"hi"}]}`
	ephemeral := sha256.Sum256([]byte("byorelay-fuzz/ephemeral"))
	genuine, err := sealWith(bytes.NewReader(ephemeral[:]), plaintext, site, device.Public().Encryption, ctx)
	if err != nil {
		f.Fatal(err)
	}
	body, _ := EnvelopeSignedBody(ctx, plaintext)
	genuineInner, _ := MarshalJS(envelopeInner{Body: B64(body), Signature: site.Sign(body)})
	expected := ExpectedEnvelope{JobID: "job_1", SenderKeyID: site.KeyID(), RecipientKeyID: device.KeyID(), Direction: DirectionPayload}

	f.Add(genuine.Ciphertext, genuine.RecipientKeyID, genuine.SenderKeyID, genuine.Direction, genuine.DeadlineAt, genuineInner)
	f.Add(genuine.Ciphertext+"A", genuine.RecipientKeyID, genuine.SenderKeyID, genuine.Direction, genuine.DeadlineAt+1, []byte(`{"body":"e30","signature":"x"}`))
	f.Add(genuine.Ciphertext, genuine.RecipientKeyID, genuine.SenderKeyID, DirectionResult, genuine.DeadlineAt, []byte("null"))

	f.Fuzz(func(t *testing.T, ciphertext, recipientKeyID, senderKeyID, direction string, deadlineAt int64, inner []byte) {
		env := SealedEnvelope{Ciphertext: ciphertext, RecipientKeyID: recipientKeyID, SenderKeyID: senderKeyID, Direction: direction, DeadlineAt: deadlineAt}
		if got, err := Open(env, device, site.Public().Identity, expected); err == nil {
			if env != genuine || got != plaintext {
				t.Fatalf("accepted a changed envelope: %+v -> %q", env, got)
			}
		}

		// Whatever a relay can seal to the device: it holds the public key,
		// so the box opens; the pinned signature must still hold the line.
		ephemeral := sha256.Sum256(inner)
		sealed, err := box.SealAnonymous(nil, inner, device.encryptionPublic(), bytes.NewReader(ephemeral[:]))
		if err != nil {
			t.Fatal(err)
		}
		injected := genuine
		injected.Ciphertext = B64(sealed)
		injected.DeadlineAt = deadlineAt
		if got, err := Open(injected, device, site.Public().Identity, expected); err == nil {
			if got != plaintext || deadlineAt != genuine.DeadlineAt {
				t.Fatalf("accepted injected inner %q -> %q", inner, got)
			}
		}
	})
}

func FuzzVerifyGrant(f *testing.F) {
	cp := fuzzKeys(f, "control-plane")
	genuine, err := SignGrant(cp, SignedGrant{
		GrantID: "grant_1", JobID: "job_1", Site: "BYOLLM-FAZZ-E4JF-4VKV-ARQF-83MT-XW0W", User: "alice",
		Owner: "bob", Purpose: "default", Kind: "llm.chat", Service: "ollama-small", IssuedAt: testNow,
	})
	if err != nil {
		f.Fatal(err)
	}
	genuineStatement, _ := GrantStatement(genuine)
	g := genuine
	f.Add(g.GrantID, g.JobID, g.Site, g.User, g.Owner, g.Purpose, g.Kind, g.Service, g.IssuedAt, g.Signature, int64(testNow))
	f.Add(g.GrantID, g.JobID, g.Site, g.User, g.Owner, g.Purpose, g.Kind, g.Service+"\u2028", g.IssuedAt, g.Signature, int64(testNow+GrantMaxAgeMs))
	f.Add(g.GrantID, "job_1\",\"x", g.Site, g.User, g.Owner, g.Purpose, g.Kind, g.Service, g.IssuedAt+1, g.Signature, int64(testNow-ClockSkewWarnMs))

	f.Fuzz(func(t *testing.T, grantID, jobID, site, user, owner, purpose, kind, service string, issuedAt int64, signature string, now int64) {
		m := SignedGrant{GrantID: grantID, JobID: jobID, Site: site, User: user, Owner: owner, Purpose: purpose, Kind: kind, Service: service, IssuedAt: issuedAt, Signature: signature}
		// The subject comes from the grant itself so the fuzzer can reach
		// the signature check.
		if VerifyGrant(m, GrantCheck{Owner: owner, JobID: jobID, ControlPlanePublic: cp.Public().Identity, Now: now}) == nil {
			statement, _ := GrantStatement(m)
			if !bytes.Equal(statement, genuineStatement) || signature != genuine.Signature {
				t.Fatalf("accepted a grant that was never signed: %+v", m)
			}
		}
	})
}
