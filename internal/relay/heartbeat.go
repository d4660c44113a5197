package relay

import (
	"log/slog"
	"net/http"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// heartbeat records presence, renews what the daemon still holds, names
// what it lost and what the site withdrew, and tells it which sites it may
// pin.
func (r *Relay) heartbeat(c *call, q *request, who caller, req protocol.HeartbeatRequest) (reply, error) {
	if rep := r.refuseBelowFloor(c, req); rep != nil {
		return *rep, nil
	}

	now := r.now()
	if err := r.recordPresence(c, who, req); err != nil {
		return reply{}, err
	}
	pinned := q.proj.SitesFor(who.owner)
	resp, err := pinsOf(q.proj, who.owner, pinned)
	if err != nil {
		return reply{}, err
	}
	resp.UpdateTo = protocol.UpdateOfferFor(r.cfg.UpdateOffer, req.DaemonVersion)
	resp.ServerTime = now

	if len(pinned) == 0 {
		return r.nothingToServe(c, req, resp)
	}
	return r.renew(c, who, req, resp)
}

// refuseBelowFloor is the refusal of a beat whose daemon is below the
// floor; nil admits it.
func (r *Relay) refuseBelowFloor(c *call, req protocol.HeartbeatRequest) *reply {
	// The floor is checked here because the heartbeat is where the version
	// is (a claim carries none), and a daemon beats every few seconds, so a
	// straggler is refused within one beat. Unset refuses nobody: a floor
	// picked optimistically on deploy day takes working machines down.
	if r.cfg.DaemonFloor != "" {
		if below := protocol.CheckDaemonFloor(req.DaemonVersion, r.cfg.DaemonFloor); below != nil {
			r.decide(c, "refuse-below-floor", slog.String("daemonVersion", clip(req.DaemonVersion)), slog.String("floor", r.cfg.DaemonFloor))
			return &reply{status: http.StatusUpgradeRequired, code: below.Error, body: *below}
		}
	}
	return nil
}

// recordPresence sweeps, then records the beat.
func (r *Relay) recordPresence(c *call, who caller, req protocol.HeartbeatRequest) error {
	swept, err := r.store.SweepInline(c.ctx)
	if err != nil {
		return err
	}
	r.noteSweep(c.ctx, "heartbeat", swept)

	// Presence is recorded on every beat, before the no-sites branch: a
	// machine with nothing consented is still online. The matrix and the
	// withheld list replace the old ones (a union would go on advertising a
	// backend the machine lost).
	_, err = r.store.Seen(c.ctx, store.Sighting{
		RunnerID:     who.runnerID,
		Owner:        who.owner,
		Device:       who.device,
		Capabilities: nonNilCapabilities(req.Capabilities),
		Withheld:     nonNilWithheld(req.Withheld),
	})
	return err
}

// pinsOf is the part of the answer that names the sites the daemon may
// pin: their keys, how rotated ones trace back, and which are paused.
func pinsOf(proj *projection.Projection, owner string, pinned []projection.SiteRecord) (protocol.HeartbeatResponse, error) {
	// The set, not a boolean: a site that leaves it is revoked for that site
	// and the daemon drops that pin and keeps the rest.
	sites, err := siteKeys(pinned)
	if err != nil {
		return protocol.HeartbeatResponse{}, err
	}
	// How each current key traces back to one the daemon holds, only for
	// sites that rotated: evidence beside the statement of which key is
	// current, distributed and never minted here.
	var successions protocol.Record[protocol.SiteSuccession]
	// Paused sites keep their pin and route nothing; the daemon names what
	// the user has to go and read.
	awaitingConsent := []string{}
	for _, s := range pinned {
		id, err := protocol.KeyID(s.Site.Identity)
		if err != nil {
			return protocol.HeartbeatResponse{}, err
		}
		if len(s.Succeeds) > 0 {
			successions.Set(id, protocol.SiteSuccession{Succeeds: s.Succeeds, RetiringUntil: s.RetiringUntil})
		}
		if !proj.MayRouteFor(owner, s.SiteID) {
			awaitingConsent = append(awaitingConsent, id)
		}
	}
	return protocol.HeartbeatResponse{Sites: sites, Successions: successions, AwaitingConsent: awaitingConsent}, nil
}

// nothingToServe answers a daemon with no site left to serve: every lease
// is reported lost and nothing is renewed, exactly as a direct site's
// revoked branch answers, because a daemon cannot see which upstream it
// is talking to.
func (r *Relay) nothingToServe(c *call, req protocol.HeartbeatRequest, resp protocol.HeartbeatResponse) (reply, error) {
	lost := make([]protocol.GrantRef, 0, len(req.ActiveLeases))
	for _, l := range req.ActiveLeases {
		lost = append(lost, protocol.GrantRef{JobID: l.JobID, LeaseID: l.LeaseID})
	}
	if err := r.sweepLapsed(c, "heartbeat", store.LapsedInput{Grants: lost}); err != nil {
		return reply{}, err
	}
	r.decide(c, "heartbeat-nothing-to-serve", slog.Int("lost", len(lost)))
	resp.Cancel, resp.Lost = []protocol.GrantRef{}, lost
	return ok(resp), nil
}

// renew names what the site withdrew, renews the daemon's leases and
// names the ones it lost.
func (r *Relay) renew(c *call, who caller, req protocol.HeartbeatRequest, resp protocol.HeartbeatResponse) (reply, error) {
	// What the site withdrew: a device must hear about a cancelled job it
	// is running, or it runs work whose result nobody will accept.
	cancel, err := r.store.CancelRequests(c.ctx, who.runnerID)
	if err != nil {
		return reply{}, err
	}
	// Renewal and loss from one read. Renewed leases are not reported (no
	// daemon read that field); lost is the direction a daemon can act on.
	renewed, err := r.store.RenewLeases(c.ctx, store.RenewInput{
		RunnerID: who.runnerID,
		Leases:   req.ActiveLeases,
		LeaseMs:  r.leaseMs,
	})
	if err != nil {
		return reply{}, err
	}
	if cancel == nil {
		cancel = []protocol.GrantRef{}
	}
	lost := renewed.Lost
	if lost == nil {
		lost = []protocol.GrantRef{}
	}
	// A lease reported lost because it lapsed goes back to the queue now,
	// as the reference's sweep-first heartbeat leaves it.
	if err := r.sweepLapsed(c, "heartbeat", store.LapsedInput{Grants: lost}); err != nil {
		return reply{}, err
	}
	r.decide(c, "heartbeat",
		slog.Int("sites", len(resp.Sites)),
		slog.Int("awaitingConsent", len(resp.AwaitingConsent)),
		slog.Int("renewed", len(renewed.Renewed)),
		slog.Int("lost", len(lost)),
		slog.Int("cancel", len(cancel)),
		slog.Bool("updateOffered", resp.UpdateTo != ""))
	resp.Cancel, resp.Lost = cancel, lost
	return ok(resp), nil
}

func nonNilWithheld(w []protocol.WithheldKind) []protocol.WithheldKind {
	if w == nil {
		return []protocol.WithheldKind{}
	}
	return w
}
