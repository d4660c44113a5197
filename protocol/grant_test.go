package protocol

import (
	"errors"
	"testing"
)

func testGrant(t testing.TB, cp *Keys) SignedGrant {
	t.Helper()
	g, err := SignGrant(cp, SignedGrant{
		GrantID: "grant_1", JobID: "job_1", Site: "BYOLLM-FAZZ-E4JF-4VKV-ARQF-83MT-XW0W", User: "alice",
		Owner: "bob", Purpose: "default", Kind: "llm.chat", Service: "ollama-small", IssuedAt: testNow,
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestVerifyGrantAcceptsAFreshGenuineGrant(t *testing.T) {
	cp := newTestKeys(t)
	g := testGrant(t, cp)
	if err := VerifyGrant(g, GrantCheck{Owner: "bob", JobID: "job_1", ControlPlanePublic: cp.Public().Identity, Now: testNow + 1000}); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyGrantRefusalsInTheReferenceOrder(t *testing.T) {
	cp := newTestKeys(t)
	other := newTestKeys(t)
	g := testGrant(t, cp)
	ok := GrantCheck{Owner: "bob", JobID: "job_1", ControlPlanePublic: cp.Public().Identity, Now: testNow}

	tests := []struct {
		name  string
		grant SignedGrant
		check func(*GrantCheck)
		want  GrantRefusal
	}{
		{"another owner, even when also expired and forged", withSig(g, "AAAA"), func(c *GrantCheck) { c.Owner = "carol"; c.Now = testNow + 10*GrantMaxAgeMs }, GrantWrongOwner},
		{"another job, even when also expired", g, func(c *GrantCheck) { c.JobID = "job_2"; c.Now = testNow + 10*GrantMaxAgeMs }, GrantWrongJob},
		{"issued further ahead than the skew tolerance", g, func(c *GrantCheck) { c.Now = testNow - ClockSkewWarnMs - 1 }, GrantFromTheFuture},
		{"older than the max age, even when forged", withSig(g, "AAAA"), func(c *GrantCheck) { c.Now = testNow + GrantMaxAgeMs + 1 }, GrantExpired},
		{"older than a shorter configured max age", g, func(c *GrantCheck) { c.Now = testNow + 1001; c.MaxAgeMs = 1000 }, GrantExpired},
		{"signed by another key", g, func(c *GrantCheck) { c.ControlPlanePublic = other.Public().Identity }, GrantBadSignature},
		{"a pinned key that is not a key", g, func(c *GrantCheck) { c.ControlPlanePublic = "x" }, GrantBadSignature},
		{"a signature that is not base64url", withSig(g, "!"+g.Signature[1:]), func(*GrantCheck) {}, GrantBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.check(&c)
			if err := VerifyGrant(tt.grant, c); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestVerifyGrantWindowEdges(t *testing.T) {
	cp := newTestKeys(t)
	g := testGrant(t, cp)
	for _, now := range []int64{testNow - ClockSkewWarnMs, testNow, testNow + GrantMaxAgeMs} {
		if err := VerifyGrant(g, GrantCheck{Owner: "bob", JobID: "job_1", ControlPlanePublic: cp.Public().Identity, Now: now}); err != nil {
			t.Errorf("now=%d: %v", now, err)
		}
	}
}

func TestEveryGrantFieldIsSigned(t *testing.T) {
	cp := newTestKeys(t)
	g := testGrant(t, cp)
	// Owner and job id are checked against the caller first, so the check
	// follows the change to reach the signature.
	mutations := map[string]func(*SignedGrant){
		"grantId":  func(g *SignedGrant) { g.GrantID += "x" },
		"jobId":    func(g *SignedGrant) { g.JobID += "x" },
		"site":     func(g *SignedGrant) { g.Site += "x" },
		"user":     func(g *SignedGrant) { g.User += "x" },
		"owner":    func(g *SignedGrant) { g.Owner += "x" },
		"purpose":  func(g *SignedGrant) { g.Purpose += "x" },
		"kind":     func(g *SignedGrant) { g.Kind += "x" },
		"service":  func(g *SignedGrant) { g.Service += "x" },
		"issuedAt": func(g *SignedGrant) { g.IssuedAt++ },
	}
	for field, mutate := range mutations {
		t.Run(field, func(t *testing.T) {
			m := g
			mutate(&m)
			err := VerifyGrant(m, GrantCheck{Owner: m.Owner, JobID: m.JobID, ControlPlanePublic: cp.Public().Identity, Now: testNow})
			if !errors.Is(err, GrantBadSignature) {
				t.Fatalf("changing %s: got %v, want bad-signature", field, err)
			}
		})
	}
}

func TestGrantStatementEscapesStringsLikeJSONStringify(t *testing.T) {
	g := SignedGrant{
		GrantID: "g", IssuedAt: 42, JobID: "a\"b\\c", Kind: "<k>&", Owner: "o\u2028\u2029",
		Purpose: "p\n\t\x01", Service: "é😀", Site: "s", User: "u",
	}
	got, err := GrantStatement(g)
	if err != nil {
		t.Fatal(err)
	}
	want := `["byollm/v1/grant","g",42,"a\"b\\c","<k>&","o` + "\u2028\u2029" + `","p\n\t\u0001","é😀","s","u"]`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func withSig(g SignedGrant, sig string) SignedGrant {
	g.Signature = sig
	return g
}
