package controlplane

import (
	"context"
	"slices"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/store"
)

// ConsentState is where one (owner, site) consent stands after a change.
type ConsentState struct {
	Owner  string `json:"owner"`
	SiteID string `json:"siteId"`
	// Paused: the consent stands and nothing routes under it.
	Paused bool `json:"paused"`
	// Revoked: the route was revoked; the consent no longer counts.
	Revoked bool `json:"revoked"`
}

// MaxOwnerConsents bounds the consents an admin change lets one owner hold.
// Every request of the owner's devices reads them all, and the record of
// every site they name.
const MaxOwnerConsents = 100

// AddConsent records owner's consent to siteID, unpaused. A consent that
// stands already is refused (pause and resume are their own changes); a
// revoked one is restored, because consenting again is a person's new
// decision and outranks the old revocation.
func (a *Admin) AddConsent(ctx context.Context, owner, siteID string) (ConsentState, int64, error) {
	return a.changeConsent(ctx, "consent added", owner, siteID, func(f *projection.Fixture) error {
		if !slices.ContainsFunc(f.Sites, func(s projection.SiteRecord) bool { return s.SiteID == siteID }) {
			// The relay would accept it and route nothing; refusing here
			// catches the typo before someone wonders why.
			return notFound("no site %q is registered", siteID)
		}
		if !revoked(f, owner, siteID) && hasConsent(f, owner, siteID) {
			return conflict("%q already consents to site %q", owner, siteID)
		}
		if !hasConsent(f, owner, siteID) && len(f.Consents) >= MaxOwnerConsents {
			return conflict("%q has %d consents, the most one owner may hold", owner, len(f.Consents))
		}
		f.Revoked = slices.DeleteFunc(slices.Clone(f.Revoked), func(r projection.RevocationRecord) bool {
			return r.Owner == owner && r.SiteID == siteID
		})
		if hasConsent(f, owner, siteID) {
			setPaused(f, owner, siteID, false)
			return nil
		}
		f.Consents = append(f.Consents, projection.ConsentRecord{Owner: owner, SiteID: siteID})
		return nil
	})
}

// PauseConsent stops routing under a standing consent without revoking it:
// the site stays in the owner's pairing set and the daemon keeps its pin,
// so resuming never costs a re-pair.
func (a *Admin) PauseConsent(ctx context.Context, owner, siteID string) (ConsentState, int64, error) {
	return a.changeConsent(ctx, "consent paused", owner, siteID, func(f *projection.Fixture) error {
		if err := standing(f, owner, siteID); err != nil {
			return err
		}
		setPaused(f, owner, siteID, true)
		return nil
	})
}

// ResumeConsent lets a paused consent route again.
func (a *Admin) ResumeConsent(ctx context.Context, owner, siteID string) (ConsentState, int64, error) {
	return a.changeConsent(ctx, "consent resumed", owner, siteID, func(f *projection.Fixture) error {
		if err := standing(f, owner, siteID); err != nil {
			return err
		}
		setPaused(f, owner, siteID, false)
		return nil
	})
}

// RevokeConsent revokes the route: the consent record stays and a
// revocation is added, so "revoked" and "never consented" remain different
// answers to someone debugging why routing stopped. The consent's mappings
// are deleted with it (a pause keeps them). Revoking twice is not an
// error.
func (a *Admin) RevokeConsent(ctx context.Context, owner, siteID string) (ConsentState, int64, error) {
	return a.changeConsent(ctx, "consent revoked", owner, siteID, func(f *projection.Fixture) error {
		if revoked(f, owner, siteID) {
			return nil
		}
		if !hasConsent(f, owner, siteID) {
			return notFound("%q has no consent to site %q", owner, siteID)
		}
		f.Revoked = append(f.Revoked, projection.RevocationRecord{Owner: owner, SiteID: siteID})
		// Withdrawing a consent withdraws the choices made under it: a
		// person who consents again starts unmapped, rather than finding
		// their work routed by a decision they made for a relationship
		// they ended.
		f.Consents = slices.Clone(f.Consents)
		for i, c := range f.Consents {
			if c.Owner == owner && c.SiteID == siteID {
				f.Consents[i].Mappings = nil
			}
		}
		return nil
	})
}

func (a *Admin) changeConsent(ctx context.Context, what, owner, siteID string, change func(f *projection.Fixture) error) (ConsentState, int64, error) {
	if owner == "" || siteID == "" {
		return ConsentState{}, 0, invalid("owner and siteId must not be empty")
	}
	if err := withinBound("owner", owner, store.MaxOwnerBytes); err != nil {
		return ConsentState{}, 0, err
	}
	var state ConsentState
	version, err := a.store.update(ctx, []string{ownerKey(owner), siteKey(siteID)}, func(f *projection.Fixture) error {
		if err := change(f); err != nil {
			return err
		}
		state = consentState(f, owner, siteID)
		return nil
	})
	if err != nil {
		return ConsentState{}, 0, err
	}
	a.log.InfoContext(ctx, what, "owner", owner, "site", siteID, "paused", state.Paused, "revoked", state.Revoked, "version", version)
	return state, version, nil
}

func hasConsent(f *projection.Fixture, owner, siteID string) bool {
	return slices.ContainsFunc(f.Consents, func(c projection.ConsentRecord) bool { return c.Owner == owner && c.SiteID == siteID })
}

func revoked(f *projection.Fixture, owner, siteID string) bool {
	return slices.ContainsFunc(f.Revoked, func(r projection.RevocationRecord) bool { return r.Owner == owner && r.SiteID == siteID })
}

func standing(f *projection.Fixture, owner, siteID string) error {
	if !hasConsent(f, owner, siteID) || revoked(f, owner, siteID) {
		return notFound("%q has no standing consent to site %q", owner, siteID)
	}
	return nil
}

// setPaused sets every record of the pair, not only the first the relay
// reads, so a duplicate cannot undo the change when the first goes.
func setPaused(f *projection.Fixture, owner, siteID string, paused bool) {
	f.Consents = slices.Clone(f.Consents)
	for i, c := range f.Consents {
		if c.Owner == owner && c.SiteID == siteID {
			f.Consents[i].Paused = paused
		}
	}
}

func consentState(f *projection.Fixture, owner, siteID string) ConsentState {
	s := ConsentState{Owner: owner, SiteID: siteID, Revoked: revoked(f, owner, siteID)}
	if i := slices.IndexFunc(f.Consents, func(c projection.ConsentRecord) bool { return c.Owner == owner && c.SiteID == siteID }); i >= 0 {
		s.Paused = f.Consents[i].Paused
	}
	return s
}
