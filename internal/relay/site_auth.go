package relay

import (
	"errors"
	"log/slog"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/internal/stream/seal"
	"github.com/byorelay/byorelay/protocol"
)

// authSite is every site-plane call, reads included: the signature header
// parsed (once for the request), the projection scoped to the site it
// names, then verifySite, then the store's bounds on what the request
// names. It returns the site that signed and what it asked; a non-nil
// *reply is the refusal to serve, an error a store failure.
func authSite[Req any, P decodable[Req]](r *Relay, c *call, q *request) (string, Req, *reply, error) {
	var req Req
	r.readSignature(q, protocol.HeaderSite)
	if err := r.scope(c, q, projection.Query{SiteID: q.callerID()}); err != nil {
		return "", req, nil, err
	}
	siteID, refusal := r.verifySite(c, q, P(&req))
	if refusal == nil {
		refusal = r.withinBounds(c, P(&req))
	}
	if refusal != nil {
		return "", req, refusal, nil
	}
	return siteID, req, nil, nil
}

// verifySite is signature first, then the site id, then the work (the
// reference's SitePlane.#authed order). The caller is whoever the
// signature says, verified against the key the control plane registered,
// never whoever the request claims; the siteId the body or query carries
// (siteNamed) must then match it, so the two can never name different
// sites. An authenticated write plane beside an open read plane would
// still hand a stranger who is online, which device claimed what and every
// lease id.
func (r *Relay) verifySite(c *call, q *request, body protocol.Validator) (string, *reply) {
	if q.sigErr != nil {
		return "", &notSigned
	}
	sig := q.sig
	// The caller slot carries the site id. Resolving it through the site
	// registry, never the device registry, is what keeps a device signature
	// from ever authenticating as a site.
	siteID := sig.CallerID
	site, found := q.proj.SiteFor(siteID)
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
		failure = protocol.VerifySiteRequest(key, c.endpoint, q.raw, sig, now)
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

	if err := decodeSite(q, body); err != nil {
		r.decide(c, "refuse-schema", slogError(err))
		return "", &schemaFailed
	}
	if claimed := siteNamed(body); claimed != siteID {
		r.decide(c, "refuse-cross-site", slog.String("named", clip(claimed)))
		return "", &notYourSite
	}
	return siteID, nil
}

// decodeSite decodes a site-plane request. The reads that carry no body
// (pending, a results page) name their site in the query, validated as the
// reference's QueryRequest does ({siteId: min(1)}). A collect names it in
// its body; the reference reads the site from the query, so a body naming
// another site than the query is a request that means two things, and is
// refused with the schema.
func decodeSite(q *request, body protocol.Validator) error {
	switch req := body.(type) {
	case *protocol.QueryRequest:
		*req = protocol.QueryRequest{SiteID: q.query.Get("siteId")}
		return req.Validate()
	case *protocol.CollectRequest:
		if err := q.body.Decode(req); err != nil {
			return err
		}
		if named := q.query.Get("siteId"); named != "" && named != req.SiteID {
			return errors.New("siteId in the query and the body differ")
		}
		return nil
	}
	return q.body.Decode(body)
}

// siteNamed is the siteId a decoded site-plane request names, "" for a
// type that names none (which no signer matches).
func siteNamed(body protocol.Validator) string {
	switch req := body.(type) {
	case *protocol.EnqueueRequest:
		return req.SiteID
	case *protocol.PayloadRequest:
		return req.SiteID
	case *protocol.CancelRequest:
		return req.SiteID
	case *protocol.QueryRequest:
		return req.SiteID
	case *protocol.CollectRequest:
		return req.SiteID
	case *seal.AttachRequest:
		return req.SiteID
	}
	return ""
}
