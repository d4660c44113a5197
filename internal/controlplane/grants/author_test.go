package grants_test

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/controlplane/grants"
	"github.com/byorelay/byorelay/internal/grant"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
)

const (
	alice = "alice" // the device's owner
	bob   = "bob"   // a member of alice's roster
)

func newAuthor(t *testing.T, opts grants.Options) *grants.Author {
	t.Helper()
	seed, err := grants.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	a, err := grants.New(seed, opts)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func capability(kind, service, scope string) protocol.Capability {
	return protocol.Capability{Kind: kind, Service: service, BackendID: "ollama", BackendClass: "http", Model: "m", OfferScope: scope}
}

// request is bob's llm.generate job, claimed by alice's device, which
// offers one service for it to her team: bob is on alice's team and mapped
// his llm.generate work (any purpose it names here) to alice's qwen.
func request() grant.Request {
	var mappings []projection.Mapping
	for _, purpose := range []string{grants.ReservedPurpose, "summaries"} {
		mappings = append(mappings, projection.Mapping{Purpose: purpose, Kind: "llm.generate", Service: "qwen", ServiceOwner: alice})
	}
	p, err := projection.New(projection.Fixture{
		Consents: []projection.ConsentRecord{{SiteID: "site-1", Owner: bob, Mappings: mappings}},
		Rosters:  []projection.RosterRecord{{ID: "alice-team", Owner: alice, Members: []string{bob}}},
	})
	if err != nil {
		panic(err)
	}
	return grant.Request{
		Job: protocol.ClaimedStub{
			ID: "job-1", Kind: "llm.generate", Owner: bob, Site: "site-key-id", Audience: "team",
			SizeClass: "small", DeadlineAt: 1_700_000_900_000, Lease: protocol.Lease{ID: "lease-1", ExpiresAt: 1_700_000_060_000},
		},
		SiteID:       "site-1",
		SiteKey:      "site-key-id",
		Owner:        alice,
		RunnerID:     "runner-1",
		Capabilities: []protocol.Capability{capability("llm.generate", "qwen", "team"), capability("embed.text", "nomic", "private")},
		Projection:   p,
	}
}

// The relay takes the method value as its author.
var _ grant.Author = (*grants.Author)(nil).Grant

func TestGrantFieldsAreSignedAsTheReferenceAndVerify(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	a := newAuthor(t, grants.Options{Clock: clock.NewManual(now)})
	d, err := a.Grant(context.Background(), request())
	if err != nil {
		t.Fatal(err)
	}
	if d.Declined != nil || d.Granted == nil {
		t.Fatalf("decision %+v, want a grant", d)
	}
	g := *d.Granted
	if !regexp.MustCompile(`^grant_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(g.GrantID) {
		t.Errorf("grantId %q is not grant_ and a v4 UUID", g.GrantID)
	}
	want := protocol.SignedGrant{
		GrantID: g.GrantID, JobID: "job-1", Site: "site-key-id", User: bob, Owner: alice,
		Purpose: "default", Kind: "llm.generate", Service: "qwen", IssuedAt: now.UnixMilli(), Signature: g.Signature,
	}
	if g != want {
		t.Fatalf("grant %+v\nwant  %+v", g, want)
	}
	if raw, err := protocol.UnB64(a.Public()); err != nil || len(raw) != 32 {
		t.Fatalf("public key %q is not a base64url Ed25519 key: %v", a.Public(), err)
	}
	check := protocol.GrantCheck{Owner: alice, JobID: "job-1", ControlPlanePublic: a.Public(), Now: now.UnixMilli() + 1000}
	if err := protocol.VerifyGrant(g, check); err != nil {
		t.Fatalf("the grant does not verify against the author's public key: %v", err)
	}
	tampered := g
	tampered.Service = "other"
	if err := protocol.VerifyGrant(tampered, check); !errors.Is(err, protocol.GrantBadSignature) {
		t.Fatalf("a grant with its service rewritten verified: %v", err)
	}
}

func TestAStubsPurposeIsSignedAndAbsentIsTheReservedOne(t *testing.T) {
	a := newAuthor(t, grants.Options{})
	in := request()
	in.Purpose = "summaries"
	d, err := a.Grant(context.Background(), in)
	if err != nil || d.Granted == nil {
		t.Fatalf("decision %+v, %v", d, err)
	}
	if d.Granted.Purpose != "summaries" {
		t.Fatalf("purpose %q, want the stub's", d.Granted.Purpose)
	}
}

func TestEveryGrantHasItsOwnID(t *testing.T) {
	a := newAuthor(t, grants.Options{})
	seen := map[string]bool{}
	for range 50 {
		d, err := a.Grant(context.Background(), request())
		if err != nil || d.Granted == nil {
			t.Fatalf("decision %+v, %v", d, err)
		}
		if seen[d.Granted.GrantID] {
			t.Fatalf("grant id %s issued twice: the device would refuse the second as replayed", d.Granted.GrantID)
		}
		seen[d.Granted.GrantID] = true
	}
}

func TestInjectedIDSourceIsUsedAndItsFailureFailsClaim(t *testing.T) {
	a := newAuthor(t, grants.Options{NewGrantID: func() (string, error) { return "grant_fixed", nil }})
	d, err := a.Grant(context.Background(), request())
	if err != nil || d.Granted == nil || d.Granted.GrantID != "grant_fixed" {
		t.Fatalf("decision %+v, %v", d, err)
	}
	broken := newAuthor(t, grants.Options{NewGrantID: func() (string, error) { return "", errors.New("no entropy") }})
	if d, err := broken.Grant(context.Background(), request()); err == nil {
		t.Fatalf("decision %+v with no grant id, want an error", d)
	}
}

func TestASeedOfTheWrongSizeIsRefused(t *testing.T) {
	if _, err := grants.New(make([]byte, 31), grants.Options{}); err == nil {
		t.Fatal("a 31-byte seed was accepted")
	}
}

func TestTheSameSeedIsTheSameKey(t *testing.T) {
	seed, err := grants.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	a, _ := grants.New(seed, grants.Options{})
	b, _ := grants.New(seed, grants.Options{})
	if a.Public() != b.Public() {
		t.Fatal("one seed gave two public keys: a restarted container would sign with a key no device pinned")
	}
}
