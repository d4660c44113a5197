package controlplane

import (
	"context"
	"slices"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// RegisterSite adds a site to the registry under siteID with its public
// identity. An id already registered, or a key another site already has, is
// refused: the relay finds a site by either, first match winning, so a
// duplicate would silently shadow one of them.
func (a *Admin) RegisterSite(ctx context.Context, siteID string, site protocol.PublicIdentity) (projection.SiteRecord, int64, error) {
	if siteID == "" {
		return projection.SiteRecord{}, 0, invalid("siteId must not be empty")
	}
	if err := withinBound("siteId", siteID, store.MaxSiteIDBytes); err != nil {
		return projection.SiteRecord{}, 0, err
	}
	keyID, err := verifiedKeyID(site)
	if err != nil {
		return projection.SiteRecord{}, 0, err
	}
	record := projection.SiteRecord{SiteID: siteID, Site: site}
	version, err := a.store.updateSite(ctx, siteID, []string{siteKey(siteID), siteKeyKey(keyID)}, func(f *projection.Fixture) error {
		for _, s := range f.Sites {
			if s.SiteID == siteID {
				return conflict("site %q is already registered", siteID)
			}
			if sameKey(s.Site, keyID) {
				return conflict("key %s is already site %q's", keyID, s.SiteID)
			}
		}
		f.Sites = append(f.Sites, record)
		return nil
	})
	if err != nil {
		return projection.SiteRecord{}, 0, err
	}
	a.log.InfoContext(ctx, "site registered", "site", siteID, "key", keyID, "version", version)
	return record, version, nil
}

// RotateSite moves a site to a new key. The succession must be the site's
// own: signed by its current key over handing over to next. The control plane never holds a site's private key,
// so it cannot make one, only check it.
//
// The link is appended to the chain (oldest first, so the last link vouches
// for the current key, as daemons walk it), and the retired key may sign
// site requests until now + RETIREMENT_WINDOW_MS. A chain already at
// MAX_SUCCESSION_CHAIN loses its oldest link: daemons that knew only that
// key must re-pair, which is what the protocol expects of a site past the
// bound.
func (a *Admin) RotateSite(ctx context.Context, siteID string, next protocol.PublicIdentity, link protocol.Succession) (projection.SiteRecord, int64, error) {
	nextID, err := verifiedKeyID(next)
	if err != nil {
		return projection.SiteRecord{}, 0, err
	}
	if err := link.Validate(); err != nil {
		return projection.SiteRecord{}, 0, invalid("succession: %v", err)
	}
	if !protocol.VerifyLink(link, nextID) {
		return projection.SiteRecord{}, 0, invalid("the succession is not a valid signature by its key over handing over to %s", nextID)
	}
	retiringUntil := clock.EpochMs(a.clock.Now()) + protocol.RetirementWindowMs
	var record projection.SiteRecord
	version, err := a.store.updateSite(ctx, siteID, []string{siteKey(siteID), siteKeyKey(nextID)}, func(f *projection.Fixture) error {
		i := slices.IndexFunc(f.Sites, func(s projection.SiteRecord) bool { return s.SiteID == siteID })
		if i < 0 {
			return notFound("no site %q is registered", siteID)
		}
		current := f.Sites[i]
		if current.Site.Identity == next.Identity {
			return invalid("site %q already has key %s", siteID, nextID)
		}
		// Checked against the key in force now, inside the update: a
		// succession signed by a key the site has since rotated away from
		// must not fork the chain.
		if link.Identity.Identity != current.Site.Identity {
			return invalid("the succession is not signed by site %q's current key", siteID)
		}
		for _, s := range f.Sites {
			if s.SiteID != siteID && sameKey(s.Site, nextID) {
				return conflict("key %s is already site %q's", nextID, s.SiteID)
			}
		}
		chain := append(slices.Clone(current.Succeeds), link)
		if len(chain) > protocol.MaxSuccessionChain {
			chain = chain[len(chain)-protocol.MaxSuccessionChain:]
		}
		record = projection.SiteRecord{SiteID: siteID, Site: next, Succeeds: chain, RetiringUntil: retiringUntil}
		f.Sites = slices.Clone(f.Sites)
		f.Sites[i] = record
		return nil
	})
	if err != nil {
		return projection.SiteRecord{}, 0, err
	}
	a.log.InfoContext(ctx, "site key rotated", "site", siteID, "key", nextID,
		"retiringUntil", retiringUntil, "chain", len(record.Succeeds), "version", version)
	return record, version, nil
}

// verifiedKeyID is the key id of an identity whose encryption key its
// identity key signed; anything else is refused.
func verifiedKeyID(id protocol.PublicIdentity) (string, error) {
	if err := id.Validate(); err != nil {
		return "", invalid("identity: %v", err)
	}
	keyID, err := protocol.KeyID(id.Identity)
	if err != nil {
		return "", invalid("identity: %v", err)
	}
	if !protocol.VerifyPublicIdentity(id) {
		return "", invalid("identity %s: its encryption key is not signed by its identity key", keyID)
	}
	return keyID, nil
}

func sameKey(id protocol.PublicIdentity, keyID string) bool {
	other, err := protocol.KeyID(id.Identity)
	return err == nil && other == keyID
}
