package store

// Route is one (site, owner) pair a device may run work for.
//
// One set of pairs, not a set of sites and a set of owners: consent binds a
// user to a site, so a device whose owner consented to site A, serving a
// roster member who consented to site B, would hold every element of two
// separate sets and still have no consented route between them. Two sets
// multiply; consent does not.
//
// The reference encodes a route as `siteId + "\u0000" + owner`; Go compares
// the struct instead, which cannot be mis-split. Implementations that must
// serialise a route use RouteKey so every replica spells it the same way.
type Route struct {
	SiteID string
	Owner  string
}

// RouteKey is the reference's routeKey: site and owner joined by NUL, which
// can appear in neither half, so this is a key rather than a parser.
func RouteKey(siteID, owner string) string { return siteID + "\x00" + owner }

// Key is RouteKey(r.SiteID, r.Owner).
func (r Route) Key() string { return RouteKey(r.SiteID, r.Owner) }
