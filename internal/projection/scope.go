package projection

// Query names what a request is about: the calling device (by runner id or
// by its identity key), the owner a pairing names, the site a site-plane
// call is signed by. Empty fields name nothing.
type Query struct {
	RunnerID       string
	DeviceIdentity string
	Owner          string
	SiteID         string
}

// Scope is the part of f that decides a request about q, in f's order:
//   - the devices with q's runner id or identity key;
//   - the owners: q.Owner and the owners of those devices;
//   - the rosters those owners own, and so the members they name;
//   - the consents and revocations of the owners and the members;
//   - the site q names and every site those consents name.
//
// A projection built from it answers every question a request about q
// asks (DeviceFor, DeviceByIdentity, RevokedDevice, SitesFor, RoutesFor,
// MayRouteFor, MayRunFor, SiteFor, and SiteIDForKey for the keys of the
// sites a device's routes name) as the whole fixture does, because each of
// those rules is "the first record that matches" over records this keeps
// all of, in the same order. It is what a store reads record by record so
// that no request reads the whole projection.
//
// SiteIDForKey differs only for a key id that two registered sites share
// and that the scope does not reach: the scoped answer is among the sites
// the caller is consented to, the whole fixture's is the first registered.
func (f Fixture) Scope(q Query) Fixture {
	f = f.normalised()
	out := EmptyFixture()
	owners := map[string]bool{}
	if q.Owner != "" {
		owners[q.Owner] = true
	}
	for _, d := range f.Devices {
		if (q.RunnerID != "" && d.RunnerID == q.RunnerID) || (q.DeviceIdentity != "" && d.Device.Identity == q.DeviceIdentity) {
			out.Devices = append(out.Devices, d)
			owners[d.Owner] = true
		}
	}
	people := map[string]bool{}
	for o := range owners {
		people[o] = true
	}
	for _, r := range f.Rosters {
		if owners[r.Owner] {
			out.Rosters = append(out.Rosters, r)
			for _, m := range r.Members {
				people[m] = true
			}
		}
	}
	sites := map[string]bool{}
	if q.SiteID != "" {
		sites[q.SiteID] = true
	}
	for _, c := range f.Consents {
		if people[c.Owner] {
			out.Consents = append(out.Consents, c)
			sites[c.SiteID] = true
		}
	}
	for _, r := range f.Revoked {
		if people[r.Owner] {
			out.Revoked = append(out.Revoked, r)
		}
	}
	for _, s := range f.Sites {
		if sites[s.SiteID] {
			out.Sites = append(out.Sites, s)
		}
	}
	return out
}
