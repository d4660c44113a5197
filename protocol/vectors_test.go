package protocol

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"golang.org/x/crypto/blake2b"
	"golang.org/x/crypto/curve25519"
	"golang.org/x/crypto/nacl/box"
)

// The vectors (testdata/vectors, made by localtest/js/gen-vectors.mjs) come
// from @byollm/protocol 0.1.1 and libsodium with fixed seeds. Every
// deterministic value in them is re-derived here, byte for byte.

type vectorKey struct {
	Ed25519SeedHex       string `json:"ed25519_seed_hex"`
	X25519PrivateHex     string `json:"x25519_private_hex"`
	IdentityB64url       string `json:"identity_b64url"`
	IdentityHex          string `json:"identity_hex"`
	EncryptionB64url     string `json:"encryption_b64url"`
	EncryptionHex        string `json:"encryption_hex"`
	EncryptionSigMessage string `json:"encryptionSig_signed_message"`
	EncryptionSigB64url  string `json:"encryptionSig_b64url"`
	KeyID                string `json:"keyId"`
	SHA256OfIdentityHex  string `json:"sha256_of_identity_hex"`
	IdentityPKCS8        string `json:"storedKeys_identityPrivate_pkcs8_b64"`
	EncryptionPKCS8      string `json:"storedKeys_encryptionPrivate_pkcs8_b64"`
}

type vectorRequest struct {
	Method          string            `json:"method"`
	Path            string            `json:"path"`
	Headers         map[string]string `json:"headers"`
	Body            string            `json:"body"`
	BodySHA256Hex   string            `json:"body_sha256_hex"`
	CanonicalString string            `json:"canonical_string"`
	CanonicalHex    string            `json:"canonical_hex"`
}

type vectorFile struct {
	Keys            map[string]vectorKey `json:"keys"`
	DaemonRequest   vectorRequest        `json:"daemonRequest"`
	SiteRequestPost vectorRequest        `json:"siteRequestPost"`
	SiteRequestGet  vectorRequest        `json:"siteRequestGet"`
	PayloadEnvelope struct {
		Plaintext           string         `json:"plaintext"`
		SignedBodyUTF8      string         `json:"signed_body_utf8"`
		SignedBodySignature string         `json:"signed_body_signature_b64url"`
		InnerJSON           string         `json:"inner_json"`
		EphemeralPrivateHex string         `json:"ephemeral_x25519_private_hex"`
		EphemeralPublicHex  string         `json:"ephemeral_x25519_public_hex"`
		NonceHex            string         `json:"nonce_blake2b24_hex"`
		SealedBoxLen        int            `json:"sealed_box_hex_len"`
		Envelope            SealedEnvelope `json:"envelope"`
	} `json:"payloadEnvelope"`
	ResultEnvelope struct {
		Plaintext   string         `json:"plaintext"`
		Envelope    SealedEnvelope `json:"envelope"`
		Disposition string         `json:"disposition"`
	} `json:"resultEnvelope"`
	Grant struct {
		SignedFields  []string    `json:"GRANT_SIGNED_FIELDS"`
		StatementUTF8 string      `json:"statement_utf8"`
		Grant         SignedGrant `json:"grant"`
	} `json:"grant"`
	Succession struct {
		StatementUTF8 string     `json:"statement_utf8"`
		Link          Succession `json:"link"`
	} `json:"succession"`
	FingerprintOfZeroKey struct {
		IdentityB64url string `json:"identity_b64url"`
		KeyID          string `json:"keyId"`
	} `json:"fingerprintOfZeroKey"`
}

// vectorsPath is the committed vectors file, relative to this package (go
// test runs in the package directory).
var vectorsPath = filepath.Join("testdata", "vectors", "byollm-v2-vectors.json")

// loadVectors reads the committed vectors. Missing vectors fail the test: a
// skipped vector test proves nothing.
func loadVectors(t testing.TB) vectorFile {
	t.Helper()
	path := vectorsPath
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the vectors: %v", err)
	}
	var v vectorFile
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	for _, name := range []string{"site", "device", "control-plane", "site2"} {
		if _, ok := v.Keys[name]; !ok {
			t.Fatalf("vectors have no %q key", name)
		}
	}
	return v
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// vectorKeys rebuilds a party's keys from the vector seeds.
func vectorKeys(t testing.TB, v vectorFile, name string) *Keys {
	t.Helper()
	k := v.Keys[name]
	keys, err := NewKeys(mustHex(t, k.Ed25519SeedHex), mustHex(t, k.X25519PrivateHex))
	if err != nil {
		t.Fatalf("keys %s: %v", name, err)
	}
	return keys
}

func equal[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s:\n got %v\nwant %v", what, got, want)
	}
}

func TestVectorKeysRederiveFromSeeds(t *testing.T) {
	v := loadVectors(t)
	for _, name := range []string{"site", "device", "control-plane", "site2"} {
		t.Run(name, func(t *testing.T) {
			want := v.Keys[name]
			seed := mustHex(t, want.Ed25519SeedHex)
			encPriv := mustHex(t, want.X25519PrivateHex)

			// The seeds themselves are SHA-256 of fixed labels.
			seedSum := sha256.Sum256([]byte("byollm-vector/" + name + "/identity"))
			equal(t, "identity seed", hex.EncodeToString(seedSum[:]), want.Ed25519SeedHex)
			encSum := sha256.Sum256([]byte("byollm-vector/" + name + "/encryption"))
			equal(t, "encryption private", hex.EncodeToString(encSum[:]), want.X25519PrivateHex)

			keys := vectorKeys(t, v, name)
			pub := keys.Public()
			equal(t, "identity", pub.Identity, want.IdentityB64url)
			equal(t, "encryption", pub.Encryption, want.EncryptionB64url)
			equal(t, "encryptionSig", pub.EncryptionSig, want.EncryptionSigB64url)
			equal(t, "keyId", keys.KeyID(), want.KeyID)
			id, err := KeyID(pub.Identity)
			if err != nil {
				t.Fatalf("KeyID: %v", err)
			}
			equal(t, "KeyID(identity)", id, want.KeyID)
			if !VerifyPublicIdentity(pub) {
				t.Errorf("VerifyPublicIdentity refused the vector identity")
			}

			if name == "site2" {
				return // site2 carries only seeds, public fields and keyId
			}
			idRaw := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
			equal(t, "identity hex", hex.EncodeToString(idRaw), want.IdentityHex)
			encRaw, err := curve25519.X25519(encPriv, curve25519.Basepoint)
			if err != nil {
				t.Fatal(err)
			}
			equal(t, "encryption hex", hex.EncodeToString(encRaw), want.EncryptionHex)
			equal(t, "signed message", EncryptionKeyContext+":"+pub.Encryption, want.EncryptionSigMessage)
			sum := sha256.Sum256(idRaw)
			equal(t, "sha256 of identity", hex.EncodeToString(sum[:]), want.SHA256OfIdentityHex)

			stored := keys.Stored(1800000000000)
			equal(t, "identity PKCS#8", stored.IdentityPrivate, want.IdentityPKCS8)
			equal(t, "encryption PKCS#8", stored.EncryptionPrivate, want.EncryptionPKCS8)
			back, err := StoredKeys{
				Version: 1, IdentityPublic: want.IdentityB64url, IdentityPrivate: want.IdentityPKCS8,
				EncryptionPublic: want.EncryptionB64url, EncryptionPrivate: want.EncryptionPKCS8,
				EncryptionSig: want.EncryptionSigB64url, CreatedAt: 1800000000000,
			}.Keys()
			if err != nil {
				t.Fatalf("StoredKeys.Keys on the vector's PKCS#8: %v", err)
			}
			equal(t, "stored keys round trip", back.Public(), pub)
		})
	}
}

func TestVectorFingerprintOfZeroKey(t *testing.T) {
	v := loadVectors(t)
	equal(t, "zero key b64url", B64(make([]byte, 32)), v.FingerprintOfZeroKey.IdentityB64url)
	got, err := KeyID(v.FingerprintOfZeroKey.IdentityB64url)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "keyId of zero key", got, v.FingerprintOfZeroKey.KeyID)
}

// checkVectorRequest re-derives one signed request: canonical string,
// signature, header parsing, and verification inside and just outside the
// window.
func checkVectorRequest(t *testing.T, req vectorRequest, keys *Keys, callerHeader, endpoint string, site bool) {
	t.Helper()
	h := http.Header{}
	for k, val := range req.Headers {
		h.Set(k, val)
	}
	sig, err := SignatureFromHeaders(h, callerHeader)
	if err != nil {
		t.Fatalf("headers: %v", err)
	}
	body := []byte(req.Body)
	canonicalEndpoint := endpoint
	if site {
		canonicalEndpoint = "site/" + endpoint
	}
	canonical := CanonicalRequest(canonicalEndpoint, sig.CallerID, sig.IssuedAt, body)
	equal(t, "canonical string", string(canonical), req.CanonicalString)
	if req.CanonicalHex != "" {
		equal(t, "canonical hex", hex.EncodeToString(canonical), req.CanonicalHex)
	}
	if req.BodySHA256Hex != "" {
		sum := sha256.Sum256(body)
		equal(t, "body sha256", hex.EncodeToString(sum[:]), req.BodySHA256Hex)
	}

	var signed RequestSignature
	verify := VerifyRequest
	if site {
		signed = SignSiteRequest(keys, endpoint, sig.CallerID, sig.IssuedAt, body)
		verify = VerifySiteRequest
	} else {
		signed = SignRequest(keys, endpoint, sig.CallerID, sig.IssuedAt, body)
	}
	equal(t, "signature", signed.Signature, req.Headers[HeaderSignature])
	out := http.Header{}
	signed.SetHeaders(out, callerHeader)
	for _, name := range []string{callerHeader, HeaderIssuedAt, HeaderSignature} {
		equal(t, "header "+name, out.Get(name), req.Headers[name])
	}

	id := keys.Public().Identity
	for _, now := range []int64{sig.IssuedAt, sig.IssuedAt - MaxClockSkewMs, sig.IssuedAt + MaxClockSkewMs} {
		if err := verify(id, endpoint, body, sig, now); err != nil {
			t.Errorf("verify at now=%d: %v", now, err)
		}
	}
	for _, now := range []int64{sig.IssuedAt - MaxClockSkewMs - 1, sig.IssuedAt + MaxClockSkewMs + 1} {
		if err := verify(id, endpoint, body, sig, now); !errors.Is(err, ErrStale) {
			t.Errorf("verify at now=%d: got %v, want ErrStale", now, err)
		}
	}
}

func TestVectorDaemonRequest(t *testing.T) {
	v := loadVectors(t)
	equal(t, "caller header", v.DaemonRequest.Headers[HeaderRunner], "runner_1")
	checkVectorRequest(t, v.DaemonRequest, vectorKeys(t, v, "device"), HeaderRunner, "claim", false)
}

func TestVectorSiteRequestPost(t *testing.T) {
	v := loadVectors(t)
	checkVectorRequest(t, v.SiteRequestPost, vectorKeys(t, v, "site"), HeaderSite, "enqueue", true)
}

func TestVectorSiteRequestGet(t *testing.T) {
	v := loadVectors(t)
	equal(t, "GET body", v.SiteRequestGet.Body, "")
	checkVectorRequest(t, v.SiteRequestGet, vectorKeys(t, v, "site"), HeaderSite, "pending", true)
}

func TestVectorPayloadEnvelopeReproducesByteForByte(t *testing.T) {
	v := loadVectors(t)
	pe := v.PayloadEnvelope
	site := vectorKeys(t, v, "site")
	device := vectorKeys(t, v, "device")
	ctx := EnvelopeContext{
		JobID:          "job_1",
		SenderKeyID:    site.KeyID(),
		RecipientKeyID: device.KeyID(),
		DeadlineAt:     1800086400000,
		Direction:      DirectionPayload,
	}

	body, err := EnvelopeSignedBody(ctx, pe.Plaintext)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "signed body", string(body), pe.SignedBodyUTF8)
	equal(t, "body signature", site.Sign(body), pe.SignedBodySignature)
	inner, err := MarshalJS(envelopeInner{Body: B64(body), Signature: site.Sign(body)})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "inner json", string(inner), pe.InnerJSON)

	ephPriv := mustHex(t, pe.EphemeralPrivateHex)
	ephPub, err := curve25519.X25519(ephPriv, curve25519.Basepoint)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "ephemeral public", hex.EncodeToString(ephPub), pe.EphemeralPublicHex)
	rpk := device.encryptionPublic()
	h, _ := blake2b.New(24, nil)
	h.Write(ephPub)
	h.Write(rpk[:])
	nonce := h.Sum(nil)
	equal(t, "nonce", hex.EncodeToString(nonce), pe.NonceHex)

	// The production path, fed the fixed ephemeral key as its randomness.
	env, err := sealWith(bytes.NewReader(ephPriv), pe.Plaintext, site, device.Public().Encryption, ctx)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "sealed envelope", env, pe.Envelope)
	sealed, err := UnB64(env.Ciphertext)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "sealed box length", len(sealed), pe.SealedBoxLen)
	equal(t, "overhead", len(sealed)-len(pe.InnerJSON), box.AnonymousOverhead)

	// box.Seal with the ephemeral key as prefix is the same construction.
	var n24 [24]byte
	copy(n24[:], nonce)
	manual := box.Seal(bytes.Clone(ephPub), []byte(pe.InnerJSON), &n24, rpk, (*[32]byte)(ephPriv))
	equal(t, "box.Seal ciphertext", B64(manual), pe.Envelope.Ciphertext)

	opened, ok := box.OpenAnonymous(nil, sealed, rpk, &device.encryption)
	if !ok {
		t.Fatal("OpenAnonymous failed on the vector")
	}
	equal(t, "opened inner", string(opened), pe.InnerJSON)

	plaintext, err := Open(pe.Envelope, device, site.Public().Identity, ExpectedEnvelope{
		JobID: "job_1", SenderKeyID: site.KeyID(), RecipientKeyID: device.KeyID(), Direction: DirectionPayload,
	})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	equal(t, "plaintext", plaintext, pe.Plaintext)
}

func TestVectorPayloadEnvelopeRefusals(t *testing.T) {
	v := loadVectors(t)
	env := v.PayloadEnvelope.Envelope
	site := vectorKeys(t, v, "site")
	device := vectorKeys(t, v, "device")
	good := ExpectedEnvelope{JobID: "job_1", SenderKeyID: site.KeyID(), RecipientKeyID: device.KeyID(), Direction: DirectionPayload}

	tests := []struct {
		name     string
		env      SealedEnvelope
		keys     *Keys
		sender   string
		expected func(*ExpectedEnvelope)
		want     EnvelopeFailure
	}{
		{"another job is a context mismatch", env, device, site.Public().Identity, func(e *ExpectedEnvelope) { e.JobID = "job_2" }, EnvelopeContextMismatch},
		{"the result direction is not for us", env, device, site.Public().Identity, func(e *ExpectedEnvelope) { e.Direction = DirectionResult }, EnvelopeNotForUs},
		{"another recipient is not for us", env, device, site.Public().Identity, func(e *ExpectedEnvelope) { e.RecipientKeyID = site.KeyID() }, EnvelopeNotForUs},
		{"the device's own identity is a bad signature", env, device, device.Public().Identity, func(*ExpectedEnvelope) {}, EnvelopeBadSignature},
		{"the site's keys cannot open it", env, site, site.Public().Identity, func(*ExpectedEnvelope) {}, EnvelopeUnopenable},
		{"a changed deadline is a context mismatch", withDeadline(env, env.DeadlineAt+1), device, site.Public().Identity, func(*ExpectedEnvelope) {}, EnvelopeContextMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exp := good
			tt.expected(&exp)
			_, err := Open(tt.env, tt.keys, tt.sender, exp)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func withDeadline(env SealedEnvelope, d int64) SealedEnvelope {
	env.DeadlineAt = d
	return env
}

func TestVectorResultEnvelopeOpensWithSiteKeys(t *testing.T) {
	v := loadVectors(t)
	re := v.ResultEnvelope
	site := vectorKeys(t, v, "site")
	device := vectorKeys(t, v, "device")
	plaintext, err := Open(re.Envelope, site, device.Public().Identity, ExpectedEnvelope{
		JobID: "job_1", SenderKeyID: device.KeyID(), RecipientKeyID: site.KeyID(), Direction: DirectionResult,
	})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	equal(t, "plaintext", plaintext, re.Plaintext)
	var outcome struct {
		Outcome struct {
			Outcome string `json:"outcome"`
		} `json:"outcome"`
	}
	if err := json.Unmarshal([]byte(plaintext), &outcome); err != nil {
		t.Fatal(err)
	}
	equal(t, "outcome matches disposition", outcome.Outcome.Outcome, re.Disposition)

	// The inner signature is the device's and no one else's.
	if _, err := Open(re.Envelope, site, site.Public().Identity, ExpectedEnvelope{
		JobID: "job_1", SenderKeyID: device.KeyID(), RecipientKeyID: site.KeyID(), Direction: DirectionResult,
	}); !errors.Is(err, EnvelopeBadSignature) {
		t.Fatalf("verified against the site's identity: got %v, want bad-signature", err)
	}
}

func TestVectorGrant(t *testing.T) {
	v := loadVectors(t)
	g := v.Grant.Grant
	cp := vectorKeys(t, v, "control-plane")
	equal(t, "signed fields", slices.Equal(v.Grant.SignedFields, GrantSignedFields), true)

	statement, err := GrantStatement(g)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "statement", string(statement), v.Grant.StatementUTF8)
	claims := g
	claims.Signature = ""
	signed, err := SignGrant(cp, claims)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "grant signature", signed.Signature, g.Signature)
	equal(t, "signed grant", signed, g)

	// Signed where the key is held apart (a KMS), over the statement's
	// bytes and attached: the same grant, byte for byte.
	elsewhere := ed25519.Sign(ed25519.NewKeyFromSeed(mustHex(t, v.Keys["control-plane"].Ed25519SeedHex)), statement)
	attached, err := AttachGrantSignature(claims, elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "grant signed elsewhere", attached, g)
	if _, err := AttachGrantSignature(claims, elsewhere[:63]); err == nil {
		t.Error("AttachGrantSignature took a 63-byte signature")
	}

	check := GrantCheck{Owner: "bob", JobID: "job_1", ControlPlanePublic: cp.Public().Identity}
	for _, now := range []int64{1800000001000, 1799999970000, 1800000120000} {
		check.Now = now
		if err := VerifyGrant(g, check); err != nil {
			t.Errorf("VerifyGrant at %d: %v", now, err)
		}
	}
	check.Now = 1799999969999
	if err := VerifyGrant(g, check); !errors.Is(err, GrantFromTheFuture) {
		t.Errorf("one ms before the window: got %v, want from-the-future", err)
	}
	check.Now = 1800000120001
	if err := VerifyGrant(g, check); !errors.Is(err, GrantExpired) {
		t.Errorf("one ms after the window: got %v, want expired", err)
	}
}

func TestVectorSuccession(t *testing.T) {
	v := loadVectors(t)
	site := vectorKeys(t, v, "site")
	site2 := vectorKeys(t, v, "site2")
	equal(t, "statement", string(SuccessionStatement(site.KeyID(), site2.KeyID())), v.Succession.StatementUTF8)
	link, err := SignSuccession(site, site2.Public())
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "link", link, v.Succession.Link)
	if !VerifyLink(v.Succession.Link, site2.KeyID()) {
		t.Error("VerifyLink refused the vector link")
	}
	if VerifyLink(v.Succession.Link, site.KeyID()) {
		t.Error("VerifyLink accepted the vector link for another successor")
	}
}

// TestGrantSignedFieldsCoverTheStruct keeps the signed field list in step
// with SignedGrant: a field added to the struct and not to the statement
// would be rewritable by anyone in the middle.
func TestGrantSignedFieldsCoverTheStruct(t *testing.T) {
	var names []string
	typ := reflect.TypeFor[SignedGrant]()
	for i := range typ.NumField() {
		name := typ.Field(i).Tag.Get("json")
		if name != "signature" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, GrantSignedFields) {
		t.Fatalf("SignedGrant fields %v, signed fields %v", names, GrantSignedFields)
	}
}
