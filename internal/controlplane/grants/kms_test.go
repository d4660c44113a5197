package grants_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/kms"

	"github.com/byorelay/byorelay/internal/controlplane/grants"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/fakekms"
	"github.com/byorelay/byorelay/protocol"
)

// kmsSigner is a KMSSigner over a key the stand-in made from seed, through
// the SDK's own kms client.
func kmsSigner(t *testing.T, fake *fakekms.Server, seed []byte) *grants.KMSSigner {
	t.Helper()
	id := fake.AddKey(t, seed)
	s, err := grants.NewKMSSigner(context.Background(), kms.NewFromConfig(localtest.AWSConfig(fake.URL)), id)
	if err != nil {
		t.Fatal(err)
	}
	if s.KeyARN() != fakekms.ARN(id) {
		t.Fatalf("signs with %q, want the key ARN KMS named, %q", s.KeyARN(), fakekms.ARN(id))
	}
	return s
}

// trickyClaims are grants whose fields need JSON escaping, in both
// encoders' rules (line separators, HTML characters, quotes, backslashes,
// astral characters): where a statement built one way and signed another
// would first differ.
func trickyClaims(site string, now int64) []protocol.SignedGrant {
	return []protocol.SignedGrant{
		{GrantID: "grant_1", JobID: "job-1", Site: site, User: "bob", Owner: "alice",
			Purpose: "default", Kind: "llm.generate", Service: "qwen", IssuedAt: now},
		{GrantID: "grant_2", JobID: "job <&> \"2\"", Site: site, User: "al\u2028ice\\", Owner: "bob\u2029",
			Purpose: "déf\nault", Kind: "llm.chat", Service: "svc 😀\u0001", IssuedAt: now - 1},
	}
}

func signWith(t *testing.T, s grants.Signer, claims protocol.SignedGrant) protocol.SignedGrant {
	t.Helper()
	statement, err := protocol.GrantStatement(claims)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := s.Sign(context.Background(), statement)
	if err != nil {
		t.Fatal(err)
	}
	g, err := protocol.AttachGrantSignature(claims, sig)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// A key held in KMS signs the grant the same key held as a seed signs,
// byte for byte (Ed25519 is deterministic): the statement bytes and the
// signature are the seed path's, which the protocol's vectors pin.
func TestKMSSignerSignsTheGrantTheSeedSigns(t *testing.T) {
	fake := fakekms.Start(t, fakekms.Options{})
	seed, err := grants.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	viaKMS := kmsSigner(t, fake, seed)
	viaSeed, err := grants.NewSeedSigner(seed)
	if err != nil {
		t.Fatal(err)
	}
	if viaKMS.Public() != viaSeed.Public() {
		t.Fatalf("KMS public key %q, the seed's %q", viaKMS.Public(), viaSeed.Public())
	}
	keys, err := protocol.NewKeys(seed, make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	for _, claims := range trickyClaims("site-key", 1_800_000_000_000) {
		got, err := protocol.Encode(signWith(t, viaKMS, claims))
		if err != nil {
			t.Fatal(err)
		}
		seeded, err := protocol.SignGrant(keys, claims)
		if err != nil {
			t.Fatal(err)
		}
		want, err := protocol.Encode(seeded)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("signed through KMS:\n%s\nsigned with the seed:\n%s", got, want)
		}
	}
	if fake.Signs() != 2 {
		t.Fatalf("KMS signed %d times, want once a grant", fake.Signs())
	}
}

// The reference's own verifier, @byollm/protocol 0.1.1's verifyGrant,
// accepts a grant signed through KMS against the key KMS hands out,
// rebuilds the same statement bytes, and refuses it with a field changed.
func TestKMSSignedGrantsVerifyWithTheReference(t *testing.T) {
	node, modules := localtest.RequireNode(t, "@byollm/protocol")
	fake := fakekms.Start(t, fakekms.Options{})
	s := kmsSigner(t, fake, nil)
	const now = 1_800_000_000_000
	claims := trickyClaims("site-key", now)
	var signed []protocol.SignedGrant
	for _, c := range claims {
		signed = append(signed, signWith(t, s, c))
	}
	in, err := json.Marshal(map[string]any{"controlPlanePublic": s.Public(), "now": now + 1000, "grants": signed})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, filepath.Join("testdata", "verify-grant.mjs"), modules)
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	var out []struct {
		Schema    bool    `json:"schema"`
		Verdict   *string `json:"verdict"`
		Statement string  `json:"statement"`
		Tampered  *string `json:"tampered"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || len(out) != len(signed) {
		t.Fatalf("node answered %s (%v)", stdout.String(), err)
	}
	for i, g := range signed {
		statement, _ := protocol.GrantStatement(g)
		switch r := out[i]; {
		case !r.Schema:
			t.Errorf("grant %d: not a SignedGrant to the reference", i)
		case r.Verdict != nil:
			t.Errorf("grant %d: the reference refused it: %s", i, *r.Verdict)
		case r.Statement != string(statement):
			t.Errorf("grant %d: the reference's statement\n%q\nGo's\n%q", i, r.Statement, statement)
		case r.Tampered == nil || *r.Tampered != "bad-signature":
			t.Errorf("grant %d: a changed service answered %v, want bad-signature", i, r.Tampered)
		}
	}
}

// A key devices could not verify is refused when the signer is made, with
// the reason, not at every claim: another key spec, or no key at all.
func TestKMSSignerRefusesAKeyDevicesCannotVerify(t *testing.T) {
	fake := fakekms.Start(t, fakekms.Options{})
	api := kms.NewFromConfig(localtest.AWSConfig(fake.URL))
	ctx := context.Background()
	for _, c := range []struct{ name, keyID, says string }{
		{"a P-256 key", fake.AddP256Key(t), "ECC_NIST_P256"},
		{"a key that does not exist", "00000000-0000-0000-0000-000000000000", "NotFoundException"},
		{"no key id", "", "no KMS key id"},
	} {
		if _, err := grants.NewKMSSigner(ctx, api, c.keyID); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.says)
		}
	}
}

// A statement over KMS's 4,096-byte RAW limit is refused before any call:
// it would be refused by KMS after a round trip.
func TestKMSSignerRefusesAnOversizedStatement(t *testing.T) {
	fake := fakekms.Start(t, fakekms.Options{})
	s := kmsSigner(t, fake, nil)
	big := bytes.Repeat([]byte("x"), grants.MaxKMSMessage+1)
	if _, err := s.Sign(context.Background(), big); !errors.Is(err, grants.ErrStatementTooLarge) {
		t.Fatalf("signed %d bytes: %v, want ErrStatementTooLarge", len(big), err)
	}
	sig, err := s.Sign(context.Background(), big[:grants.MaxKMSMessage])
	if err != nil || !ed25519.Verify(mustPublic(t, s), big[:grants.MaxKMSMessage], sig) {
		t.Fatalf("signing exactly %d bytes: %v", grants.MaxKMSMessage, err)
	}
	if fake.Signs() != 1 {
		t.Fatalf("KMS was asked %d times, want once", fake.Signs())
	}
}

func mustPublic(t *testing.T, s grants.Signer) ed25519.PublicKey {
	t.Helper()
	raw, err := protocol.UnB64Len(s.Public(), ed25519.PublicKeySize)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
