package relaytest

import (
	"testing"

	"github.com/byorelay/byorelay/internal/projection"
)

// FixtureBuilder builds a projection fixture one decision at a time.
type FixtureBuilder struct {
	f projection.Fixture
}

// NewFixture starts an empty fixture: nothing consented, nothing routes.
func NewFixture() *FixtureBuilder {
	return &FixtureBuilder{f: projection.EmptyFixture()}
}

// Site registers sites.
func (b *FixtureBuilder) Site(sites ...*Site) *FixtureBuilder {
	for _, s := range sites {
		b.f.Sites = append(b.f.Sites, s.Record())
	}
	return b
}

// SiteRecord registers a site record as given (a rotated one, say).
func (b *FixtureBuilder) SiteRecord(r projection.SiteRecord) *FixtureBuilder {
	b.f.Sites = append(b.f.Sites, r)
	return b
}

// Device approves devices.
func (b *FixtureBuilder) Device(daemons ...*Daemon) *FixtureBuilder {
	for _, d := range daemons {
		b.f.Devices = append(b.f.Devices, d.Record())
	}
	return b
}

// RevokedDevice approves a device and revokes it.
func (b *FixtureBuilder) RevokedDevice(d *Daemon) *FixtureBuilder {
	r := d.Record()
	revoked := true
	r.Revoked = &revoked
	b.f.Devices = append(b.f.Devices, r)
	return b
}

// Consent records owner's consent to siteID.
func (b *FixtureBuilder) Consent(owner, siteID string) *FixtureBuilder {
	b.f.Consents = append(b.f.Consents, projection.ConsentRecord{Owner: owner, SiteID: siteID})
	return b
}

// Paused records a consent that stands and routes nothing.
func (b *FixtureBuilder) Paused(owner, siteID string) *FixtureBuilder {
	b.f.Consents = append(b.f.Consents, projection.ConsentRecord{Owner: owner, SiteID: siteID, Paused: true})
	return b
}

// Roster lets owner's machines run members' work.
func (b *FixtureBuilder) Roster(id, owner string, members ...string) *FixtureBuilder {
	b.f.Rosters = append(b.f.Rosters, projection.RosterRecord{ID: id, Owner: owner, Members: append([]string{}, members...)})
	return b
}

// Revoke revokes the (owner, siteID) route.
func (b *FixtureBuilder) Revoke(owner, siteID string) *FixtureBuilder {
	b.f.Revoked = append(b.f.Revoked, projection.RevocationRecord{Owner: owner, SiteID: siteID})
	return b
}

// Build returns the fixture.
func (b *FixtureBuilder) Build() projection.Fixture { return b.f }

// Projection builds the projection, panicking on a fixture New refuses (a
// test that builds an invalid one on purpose calls projection.New itself).
func (b *FixtureBuilder) Projection() *projection.Projection {
	p, err := projection.New(b.f)
	if err != nil {
		panic(err)
	}
	return p
}

// Demo is a small world: one site, one daemon whose owner consented to
// it. What the local server and the sample events start from.
type Demo struct {
	Site    *Site
	Daemon  *Daemon
	Fixture projection.Fixture
}

// NewDemo builds the demo world with fresh keys: site "demo-site", a daemon
// "runner-demo" owned by "demo-user", approved and consented.
func NewDemo(t testing.TB) Demo {
	t.Helper()
	site := NewSite(t, "demo-site")
	daemon := NewDaemon(t, "runner-demo", "demo-user")
	f := NewFixture().Site(site).Device(daemon).Consent(daemon.Owner, site.SiteID).Build()
	return Demo{Site: site, Daemon: daemon, Fixture: f}
}
