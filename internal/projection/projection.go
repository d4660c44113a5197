package projection

import (
	"slices"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// Projection is the relay's read-only view of a Fixture: a handful of
// questions rather than the raw lists, because every caller asking "may this
// route?" through one method is what makes CONSENT_BEFORE_ROUTE reviewable.
// Immutable once built; safe for concurrent use. A control-plane change is a
// new Projection, never an edit of this one.
type Projection struct {
	fixture Fixture
	// Indexes over fixture, each holding the first matching record's
	// position, because every rule is "the first record that matches" and
	// a claim asks sites × owners consent questions: linear scans would
	// make each claim quadratic in the size of the control plane.
	siteByID      map[string]int
	siteByKeyID   map[string]int
	deviceByID    map[string]int
	deviceByKey   map[string]int
	consentByPair map[store.Route]int
	revoked       map[store.Route]bool
	rostersOf     map[string][]int
}

// EmptyFixture is a projection with nothing consented, so nothing routes.
func EmptyFixture() Fixture { return Fixture{}.normalised() }

// New builds a projection, refusing a fixture Parse would refuse (the
// reference parses on construct and on every replace, and throws).
func New(f Fixture) (*Projection, error) {
	f = f.normalised()
	if err := f.Validate(); err != nil {
		return nil, err
	}
	p := &Projection{
		fixture:       f,
		siteByID:      map[string]int{},
		siteByKeyID:   map[string]int{},
		deviceByID:    map[string]int{},
		deviceByKey:   map[string]int{},
		consentByPair: map[store.Route]int{},
		revoked:       map[store.Route]bool{},
		rostersOf:     map[string][]int{},
	}
	for i, s := range f.Sites {
		first(p.siteByID, s.SiteID, i)
		// An identity that is not a key has no key id and matches nothing.
		if id, err := protocol.KeyID(s.Site.Identity); err == nil {
			first(p.siteByKeyID, id, i)
		}
	}
	for i, d := range f.Devices {
		first(p.deviceByID, d.RunnerID, i)
		first(p.deviceByKey, d.Device.Identity, i)
	}
	for i, c := range f.Consents {
		first(p.consentByPair, store.Route{SiteID: c.SiteID, Owner: c.Owner}, i)
	}
	for _, r := range f.Revoked {
		p.revoked[store.Route{SiteID: r.SiteID, Owner: r.Owner}] = true
	}
	for i, r := range f.Rosters {
		p.rostersOf[r.Owner] = append(p.rostersOf[r.Owner], i)
	}
	return p, nil
}

// first records i under k unless an earlier record holds it.
func first[K comparable](m map[K]int, k K, i int) {
	if _, taken := m[k]; !taken {
		m[k] = i
	}
}

// Fixture returns a copy of the fixture this projection answers from.
func (p *Projection) Fixture() Fixture {
	f := p.fixture
	f.Sites = slices.Clone(f.Sites)
	f.Consents = slices.Clone(f.Consents)
	f.Devices = slices.Clone(f.Devices)
	f.Rosters = slices.Clone(f.Rosters)
	f.Revoked = slices.Clone(f.Revoked)
	return f
}

// SiteFor is the site this id names, if the control plane registered it:
// the only source of a site's public identity.
func (p *Projection) SiteFor(siteID string) (SiteRecord, bool) {
	if i, ok := p.siteByID[siteID]; ok {
		return p.fixture.Sites[i], true
	}
	return SiteRecord{}, false
}

// DeviceFor is the device this runner id names, if a human approved it.
// Absent for a device the control plane does not know, which is how the
// relay refuses to be the authority on identity.
func (p *Projection) DeviceFor(runnerID string) (DeviceRecord, bool) {
	if i, ok := p.deviceByID[runnerID]; ok {
		return p.fixture.Devices[i], true
	}
	return DeviceRecord{}, false
}

// DeviceByIdentity is the device approved for exactly this raw identity
// public key (the reference's deviceByFingerprint, which compares the key
// string, not a fingerprint).
func (p *Projection) DeviceByIdentity(identityPublic string) (DeviceRecord, bool) {
	if i, ok := p.deviceByKey[identityPublic]; ok {
		return p.fixture.Devices[i], true
	}
	return DeviceRecord{}, false
}

// ConsentFor is the consent binding owner to siteID, if it exists and was
// not revoked. Liveness, not routing: a paused consent is returned (the
// relationship stands, the daemon is not revoked, the pairing stays). Ask
// MayRouteFor before moving anybody's work. The site need not be registered.
func (p *Projection) ConsentFor(owner, siteID string) (ConsentRecord, bool) {
	pair := store.Route{SiteID: siteID, Owner: owner}
	if p.revoked[pair] {
		return ConsentRecord{}, false
	}
	if i, ok := p.consentByPair[pair]; ok {
		return p.fixture.Consents[i], true
	}
	return ConsentRecord{}, false
}

// SitesFor is every registered site this owner has a standing consent for,
// paused included: the pairing and pin set (a paused consent keeps its pin,
// so re-consenting never costs a re-pair). Sorted by site id in JS string
// order, because it ends up in a pairings file and in a fingerprint list a
// human compares by eye, and an order that drifts between polls is a diff
// nobody can read.
func (p *Projection) SitesFor(owner string) []SiteRecord {
	out := []SiteRecord{}
	for _, s := range p.fixture.Sites {
		if _, ok := p.ConsentFor(owner, s.SiteID); ok {
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b SiteRecord) int {
		switch {
		case protocol.JSLess(a.SiteID, b.SiteID):
			return -1
		case protocol.JSLess(b.SiteID, a.SiteID):
			return 1
		}
		return 0
	})
	return out
}

// SiteIDForKey is the id of the registered site whose current identity key
// has this key id. A stub names its site by key id so a daemon can check it
// against a pinned key; this is the one place that joins key ids to account
// ids. Absent means the projection is behind, not that the job is wrong.
// Predecessor keys are not matched.
func (p *Projection) SiteIDForKey(keyID string) (string, bool) {
	if i, ok := p.siteByKeyID[keyID]; ok {
		return p.fixture.Sites[i].SiteID, true
	}
	return "", false
}

// MayRouteFor is the routing question: consent exists, was not revoked and
// is not paused. Kept apart from ConsentFor so a caller has to pick which it
// means.
func (p *Projection) MayRouteFor(owner, siteID string) bool {
	c, ok := p.ConsentFor(owner, siteID)
	return ok && !c.Paused
}

// ReservedPurpose is the purpose of a stub that names none: the purpose
// its slot is mapped, declared and granted under. The daemon compares a
// grant's purpose against the stub's purpose or this.
const ReservedPurpose = "default"

// MappingFor is the mapping this person chose for (purpose, kind) at this
// site, read from their standing consent (paused included: a pause keeps
// the mappings). Purpose is the stub's purpose, or the reserved purpose
// when the stub names none; the caller decides which.
func (p *Projection) MappingFor(owner, siteID, purpose, kind string) (Mapping, bool) {
	c, ok := p.ConsentFor(owner, siteID)
	if !ok {
		return Mapping{}, false
	}
	for _, m := range c.Mappings {
		if m.Purpose == purpose && m.Kind == kind {
			return m, true
		}
	}
	return Mapping{}, false
}

// Declares says whether this site declares purpose: a site that lists no
// purposes declares them all. False for a site the projection does not hold.
func (p *Projection) Declares(siteID, purpose string) bool {
	s, ok := p.SiteFor(siteID)
	return ok && (len(s.Purposes) == 0 || slices.Contains(s.Purposes, purpose))
}

// RevokedDevice says whether this device (this one, never its owner) has
// been revoked. Owner-scoped revocation once refused every device of an
// account with any revocation on record, including one paired seconds
// earlier, whose daemon then deleted its own pairings. An unknown device is
// not revoked here; DeviceFor is what refuses it, with a different status.
func (p *Projection) RevokedDevice(runnerID string) bool {
	d, ok := p.DeviceFor(runnerID)
	return ok && d.Revoked != nil && *d.Revoked
}

// PausedFor says whether this pair is consented and paused.
func (p *Projection) PausedFor(owner, siteID string) bool {
	c, ok := p.ConsentFor(owner, siteID)
	return ok && c.Paused
}

// RoutesFor is every (site, job owner) pair this device's owner may run,
// the claim filter collapsed to data a store can match on. Pairs, not two
// sets, because consent binds an owner to a site: a set of sites times a set
// of owners contains routes nobody agreed to. Both halves are required: the
// machine's owner must route for the site (or nothing of that site runs
// here, a roster member's work included), and so must each job owner.
// Registry order, deduplicated.
func (p *Projection) RoutesFor(deviceOwner string) []store.Route {
	routes := []store.Route{}
	seen := map[store.Route]bool{}
	owners := p.OwnersRunnableBy(deviceOwner)
	for _, s := range p.fixture.Sites {
		if !p.MayRouteFor(deviceOwner, s.SiteID) {
			continue
		}
		for _, owner := range owners {
			if !p.MayRouteFor(owner, s.SiteID) {
				continue
			}
			r := store.Route{SiteID: s.SiteID, Owner: owner}
			if !seen[r] {
				seen[r] = true
				routes = append(routes, r)
			}
		}
	}
	return routes
}

// OwnersRunnableBy is every owner whose work this device's owner may run:
// the owner first, then the members of every roster they own, deduplicated
// in order. MayRunFor asked in the direction a store can use.
func (p *Projection) OwnersRunnableBy(deviceOwner string) []string {
	owners := []string{deviceOwner}
	seen := map[string]bool{deviceOwner: true}
	for _, i := range p.rostersOf[deviceOwner] {
		for _, m := range p.fixture.Rosters[i].Members {
			if !seen[m] {
				seen[m] = true
				owners = append(owners, m)
			}
		}
	}
	return owners
}

// MayRunFor says whether this device's owner may run work belonging to
// jobOwner. Only ever a narrowing: the daemon re-checks its own allowlist.
func (p *Projection) MayRunFor(deviceOwner, jobOwner string) bool {
	if deviceOwner == jobOwner {
		return true
	}
	for _, i := range p.rostersOf[deviceOwner] {
		if slices.Contains(p.fixture.Rosters[i].Members, jobOwner) {
			return true
		}
	}
	return false
}
