package relay

import (
	"errors"
	"log/slog"

	"github.com/byorelay/byorelay/protocol"
)

// authSite is every site-plane call, reads included: signature first, then
// the site id, then the work (the reference's SitePlane.#authed order). The
// caller is whoever the signature says, verified against the key
// the control plane registered, never whoever the request claims; the
// siteId the body or query carries must then match it, so the two can never
// name different sites. siteIDOf reads that siteId once body has decoded.
// An authenticated write plane beside an open read plane would still hand a
// stranger who is online, which device claimed what and every lease id.
func (r *Relay) authSite(c *call, s siteRequest, decode func() error, siteIDOf func() string) (string, *reply) {
	sig, err := protocol.SignatureFromHeaders(s.header, protocol.HeaderSite)
	if err != nil {
		return "", &notSigned
	}
	// The caller slot carries the site id. Resolving it through the site
	// registry, never the device registry, is what keeps a device signature
	// from ever authenticating as a site.
	siteID := sig.CallerID
	site, found := s.proj.SiteFor(siteID)
	if !found {
		r.decide(c, "refuse-site-unregistered")
		return "", &siteUnregistered
	}
	// Named in the logs once it is a registered site, not before: the
	// header is the caller's to make as long as it likes.
	c.site = siteID

	// Which keys may sign for this site now: the current one
	// and, while the retirement window is open by the relay's own clock,
	// the keys it superseded. A site mid-rotation has two processes
	// mid-deploy and a queue of work signed a minute ago; refusing the old
	// key the instant the record moves makes rotation a flag day. The
	// window is the relay's clock because a window a caller could assert
	// would not be a window.
	now := r.now()
	acceptable := []string{site.Site.Identity}
	if site.RetiringUntil != 0 && now < site.RetiringUntil {
		for _, link := range site.Succeeds {
			acceptable = append(acceptable, link.Identity.Identity)
		}
	}
	// Current key first; the last failure is the one reported, and a stale
	// one stops the loop (it is stale against every key). Seeded with a
	// refusal, so a loop entered zero times cannot fall through into an
	// authenticated request.
	failure := protocol.ErrBadSignature
	for i, key := range acceptable {
		// Over the bytes as sent, as for a daemon (authDaemon).
		failure = protocol.VerifySiteRequest(key, c.endpoint, s.raw, sig, now)
		if failure == nil {
			if i > 0 {
				r.decide(c, "accept-retiring-key")
			}
			break
		}
		if errors.Is(failure, protocol.ErrStale) {
			break
		}
	}
	if failure != nil {
		if errors.Is(failure, protocol.ErrStale) {
			r.decide(c, "refuse-clock-skew")
			rep := clockSkew(now)
			return "", &rep
		}
		r.decide(c, "refuse-bad-signature")
		return "", &badSignature
	}

	if err := decode(); err != nil {
		r.decide(c, "refuse-schema", slogError(err))
		return "", &schemaFailed
	}
	if claimed := siteIDOf(); claimed != siteID {
		r.decide(c, "refuse-cross-site", slog.String("named", clip(claimed)))
		return "", &notYourSite
	}
	return siteID, nil
}
