package projection_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

func identity(t *testing.T) protocol.PublicIdentity {
	t.Helper()
	k, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	return k.Public()
}

func build(t *testing.T, f projection.Fixture) *projection.Projection {
	t.Helper()
	p, err := projection.New(f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func siteIDs(sites []projection.SiteRecord) []string {
	ids := []string{}
	for _, s := range sites {
		ids = append(ids, s.SiteID)
	}
	return ids
}

func TestParse(t *testing.T) {
	id := `{"identity":"i","encryption":"e","encryptionSig":"s"}`
	t.Run("absent lists default to empty, consents is required, paused defaults to false", func(t *testing.T) {
		f, err := projection.Parse([]byte(`{"consents":[{"owner":"a","siteId":"s"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		if f.Sites == nil || f.Devices == nil || f.Rosters == nil || f.Revoked == nil || f.Consents[0].Paused {
			t.Fatalf("%+v", f)
		}
		out, err := protocol.Encode(f)
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != `{"sites":[],"consents":[{"owner":"a","siteId":"s","paused":false}],"devices":[],"rosters":[],"revoked":[]}` {
			t.Fatalf("encoded %s", out)
		}
	})
	t.Run("a full fixture round-trips", func(t *testing.T) {
		in := `{"sites":[{"siteId":"s","site":` + id + `,"succeeds":[{"identity":` + id + `,"signature":"x"}],"retiringUntil":5}],` +
			`"consents":[{"owner":"a","siteId":"s","paused":true}],"devices":[{"owner":"a","runnerId":"r","device":` + id + `,"revoked":false}],` +
			`"rosters":[{"id":"t","owner":"a","members":["b"]}],"revoked":[{"owner":"a","siteId":"s"}]}`
		f, err := projection.Parse([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := protocol.Encode(f)
		if string(out) != in {
			t.Fatalf("got  %s\nwant %s", out, in)
		}
	})
	refused := []struct{ name, json string }{
		{"missing consents", `{}`},
		{"an unknown top-level key", `{"consents":[],"terms":[]}`},
		{"an unknown nested key", `{"consents":[{"owner":"a","siteId":"s","note":"x"}]}`},
		{"null", `{"consents":null}`},
		{"an empty owner", `{"consents":[{"owner":"","siteId":"s"}]}`},
		{"an empty member", `{"consents":[],"rosters":[{"id":"t","owner":"a","members":[""]}]}`},
		{"members missing", `{"consents":[],"rosters":[{"id":"t","owner":"a"}]}`},
		{"a site without keys", `{"consents":[],"sites":[{"siteId":"s"}]}`},
		{"a zero retiringUntil", `{"consents":[],"sites":[{"siteId":"s","site":` + id + `,"retiringUntil":0}]}`},
		{"a negative retiringUntil", `{"consents":[],"sites":[{"siteId":"s","site":` + id + `,"retiringUntil":-1}]}`},
		{"a fractional retiringUntil", `{"consents":[],"sites":[{"siteId":"s","site":` + id + `,"retiringUntil":1.5}]}`},
		{"a revoked flag that is not a boolean", `{"consents":[],"devices":[{"owner":"a","runnerId":"r","device":` + id + `,"revoked":"yes"}]}`},
		{"not JSON", `{`},
	}
	for _, c := range refused {
		t.Run("refuses "+c.name, func(t *testing.T) {
			_, err := projection.Parse([]byte(c.json))
			var de *protocol.DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("got %v", err)
			}
		})
	}
	t.Run("refuses a succession chain longer than 64", func(t *testing.T) {
		links := make([]protocol.Succession, 65)
		for i := range links {
			links[i] = protocol.Succession{Identity: protocol.PublicIdentity{Identity: "i", Encryption: "e", EncryptionSig: "s"}, Signature: "x"}
		}
		_, err := projection.New(projection.Fixture{Sites: []projection.SiteRecord{{SiteID: "s", Site: links[0].Identity, Succeeds: links}}})
		if err == nil {
			t.Fatal("accepted")
		}
	})
}

func TestSitesFor(t *testing.T) {
	p := build(t, projection.Fixture{
		Sites: []projection.SiteRecord{
			{SiteID: "zeta", Site: identity(t)}, {SiteID: "alpha", Site: identity(t)},
			{SiteID: "mid", Site: identity(t)}, {SiteID: "\U0001F600", Site: identity(t)}, {SiteID: "\uFF21", Site: identity(t)},
			{SiteID: "gone", Site: identity(t)}, {SiteID: "unconsented", Site: identity(t)},
		},
		Consents: []projection.ConsentRecord{
			{Owner: "alice", SiteID: "zeta"}, {Owner: "alice", SiteID: "alpha", Paused: true}, {Owner: "alice", SiteID: "mid"},
			{Owner: "alice", SiteID: "\U0001F600"}, {Owner: "alice", SiteID: "\uFF21"}, {Owner: "alice", SiteID: "gone"},
			{Owner: "alice", SiteID: "unregistered"},
		},
		Revoked: []projection.RevocationRecord{{Owner: "alice", SiteID: "gone"}},
	})
	// JS string order: the astral character's lead surrogate (U+D83D)
	// sorts before U+FF21, where Go's byte order would put it after.
	want := []string{"alpha", "mid", "zeta", "\U0001F600", "\uFF21"}
	if got := siteIDs(p.SitesFor("alice")); !slices.Equal(got, want) {
		t.Fatalf("got %q want %q", got, want)
	}
	if got := p.SitesFor("stranger"); len(got) != 0 || got == nil {
		t.Fatalf("stranger %v", got)
	}
}

func TestConsentPauseAndRevocation(t *testing.T) {
	p := build(t, projection.Fixture{
		Sites:    []projection.SiteRecord{{SiteID: "s", Site: identity(t)}},
		Consents: []projection.ConsentRecord{{Owner: "a", SiteID: "s", Paused: true}, {Owner: "b", SiteID: "s"}, {Owner: "b", SiteID: "s", Paused: true}, {Owner: "c", SiteID: "s"}},
		Revoked:  []projection.RevocationRecord{{Owner: "c", SiteID: "s"}},
	})
	if c, ok := p.ConsentFor("a", "s"); !ok || !c.Paused {
		t.Fatal("a paused consent is still a consent")
	}
	if p.MayRouteFor("a", "s") || !p.PausedFor("a", "s") {
		t.Fatal("paused routes")
	}
	if !p.MayRouteFor("b", "s") || p.PausedFor("b", "s") {
		t.Fatal("the first matching consent decides")
	}
	if _, ok := p.ConsentFor("c", "s"); ok || p.MayRouteFor("c", "s") || p.PausedFor("c", "s") {
		t.Fatal("a revoked route is no consent")
	}
	if len(p.RoutesFor("a")) != 0 {
		t.Fatal("paused machine owner routes")
	}
}

func TestRoutesForArePairs(t *testing.T) {
	p := build(t, projection.Fixture{
		Sites: []projection.SiteRecord{{SiteID: "A", Site: identity(t)}, {SiteID: "B", Site: identity(t)}, {SiteID: "C", Site: identity(t)}},
		Consents: []projection.ConsentRecord{
			{Owner: "bob", SiteID: "A"}, {Owner: "alice", SiteID: "B"}, {Owner: "bob", SiteID: "C"}, {Owner: "alice", SiteID: "C"},
			{Owner: "erin", SiteID: "C", Paused: true},
		},
		Rosters: []projection.RosterRecord{{ID: "t1", Owner: "bob", Members: []string{"alice", "erin"}}, {ID: "t2", Owner: "bob", Members: []string{"alice"}}},
	})
	// bob consented to A, alice to B: no route pairs bob's machine with
	// alice's work on either. Both consented to C; erin is paused there.
	want := []store.Route{{SiteID: "A", Owner: "bob"}, {SiteID: "C", Owner: "bob"}, {SiteID: "C", Owner: "alice"}}
	if got := p.RoutesFor("bob"); !slices.Equal(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
	if got := p.OwnersRunnableBy("bob"); !slices.Equal(got, []string{"bob", "alice", "erin"}) {
		t.Fatalf("owners %v", got)
	}
	if got := p.RoutesFor("nobody"); got == nil || len(got) != 0 {
		t.Fatalf("nobody %v", got)
	}
}

func TestOwnersRunnableByAgreesWithMayRunFor(t *testing.T) {
	p := build(t, projection.Fixture{
		Rosters: []projection.RosterRecord{{ID: "t", Owner: "bob", Members: []string{"alice", "erin"}}, {ID: "u", Owner: "carol", Members: []string{}}},
	})
	people := []string{"alice", "bob", "carol", "dave", "erin"}
	for _, device := range people {
		owners := p.OwnersRunnableBy(device)
		for _, job := range people {
			if p.MayRunFor(device, job) != slices.Contains(owners, job) {
				t.Errorf("%s running %s: mayRunFor %v, owners %v", device, job, p.MayRunFor(device, job), owners)
			}
		}
	}
	if p.MayRunFor("alice", "bob") {
		t.Fatal("membership flowed back to the member")
	}
}

func TestDevicesAndKeys(t *testing.T) {
	yes, no := true, false
	siteKey := identity(t)
	old := identity(t)
	dev := identity(t)
	p := build(t, projection.Fixture{
		Sites: []projection.SiteRecord{{SiteID: "s", Site: siteKey, Succeeds: []protocol.Succession{{Identity: old, Signature: "x"}}, RetiringUntil: 10}},
		Devices: []projection.DeviceRecord{
			{Owner: "a", RunnerID: "r1", Device: dev, Revoked: &yes},
			{Owner: "a", RunnerID: "r2", Device: identity(t), Revoked: &no},
			{Owner: "a", RunnerID: "r3", Device: identity(t)},
			{Owner: "b", RunnerID: "r1", Device: identity(t)},
		},
	})
	if !p.RevokedDevice("r1") || p.RevokedDevice("r2") || p.RevokedDevice("r3") || p.RevokedDevice("unknown") {
		t.Fatal("revokedDevice")
	}
	if d, ok := p.DeviceFor("r1"); !ok || d.Owner != "a" {
		t.Fatal("deviceFor takes the first record")
	}
	if d, ok := p.DeviceByIdentity(dev.Identity); !ok || d.RunnerID != "r1" {
		t.Fatal("deviceByIdentity")
	}
	current, _ := protocol.KeyID(siteKey.Identity)
	previous, _ := protocol.KeyID(old.Identity)
	if id, ok := p.SiteIDForKey(current); !ok || id != "s" {
		t.Fatal("siteIdForKey current")
	}
	if _, ok := p.SiteIDForKey(previous); ok {
		t.Fatal("a predecessor key is not the site's key")
	}
	if s, ok := p.SiteFor("s"); !ok || s.RetiringUntil != 10 {
		t.Fatal("siteFor")
	}
	if _, ok := p.SiteFor("x"); ok {
		t.Fatal("siteFor unknown")
	}
}
