package relay

import (
	"log/slog"
	"net/http"

	"github.com/byorelay/byorelay/internal/grant"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

var runnerMismatch = fail(http.StatusForbidden, protocol.CodeForbidden, "runner id does not match the key")

// claim grants queued work to the signing device: one store call, because a
// caller that reads, filters and writes back cannot be atomic once the store
// is on a network. The projection travels as data (the route pairs), since
// a predicate cannot.
func (r *Relay) claim(c *call, q *request, who caller, req protocol.ClaimRequest) (reply, error) {
	if req.RunnerID != who.runnerID {
		// The signature verified, so we know exactly who this is; the body
		// names somebody else.
		r.decide(c, "refuse-runner-mismatch")
		return runnerMismatch, nil
	}

	// Every kind the device can run from any of its services: a job names
	// no service, and which one runs it is resolved when the grant is
	// signed.
	kinds := make([]string, 0, len(req.Capabilities))
	for _, capability := range req.Capabilities {
		kinds = append(kinds, capability.Kind)
	}
	// A paused consent drops its routes and leaves the rest: "waiting for
	// you to read something about one site" is not "cut off from
	// everything".
	routes := q.proj.RoutesFor(who.owner)
	granted, err := r.store.Claim(c.ctx, store.ClaimInput{
		RunnerID: who.runnerID,
		Owner:    who.owner,
		Device:   who.device,
		Routes:   routes,
		Kinds:    kinds,
		Max:      int(req.Max),
		LeaseMs:  r.leaseMs,
		Streams:  streamsOptIn(q.header),
	})
	if err != nil {
		return reply{}, err
	}
	r.metrics.Claimed(len(granted))
	for _, job := range granted {
		r.decide(c, "grant-lease", slog.String("job", job.ID), slog.String("lease", job.Lease.ID),
			slog.String("siteKey", job.Site), slog.Int64("leaseExpiresAt", job.Lease.ExpiresAt))
	}
	jobs := granted
	if r.cfg.AuthorGrant != nil {
		if jobs, err = r.authorGrants(c, q, who, req.Capabilities, granted); err != nil {
			return reply{}, err
		}
	}
	r.decide(c, "claimed", slog.Int("jobs", len(jobs)), slog.Int("routes", len(routes)))
	stubs := make([]protocol.ClaimedStub, 0, len(jobs))
	for _, job := range jobs {
		stubs = append(stubs, job.ClaimedStub)
	}
	rep := ok(protocol.ClaimResponse{Jobs: stubs, LeaseMs: r.leaseMs})
	rep.awaitingUntil = firstAwaitingUntil(jobs)
	return rep, nil
}

// firstAwaitingUntil is when the first awaiting-payload window of the
// grants a claim answers with closes, 0 when it answers none: the
// AwaitingUntil the store stamped on each job and handed back with it, in
// the store's time. Never recomputed here from the lease and a window of
// the relay's own: the store alone knows its window, and a wake-up set
// from a second copy of it would fire before or after the sweep that ends
// the grant. A job released because its grant was declined is not in
// jobs: no site seals it.
func firstAwaitingUntil(jobs []store.Claimed) int64 {
	var first int64
	for i, job := range jobs {
		if i == 0 || job.AwaitingUntil < first {
			first = job.AwaitingUntil
		}
	}
	return first
}

// authorGrants attaches the control plane's grant to each job this device
// actually won: after the store's atomic claim, because a grant for a job
// somebody else won would be a signed statement about work they are running.
//
// A declined job is released here rather than sent bare: a device refusing
// a job without a grant cannot tell "the control plane said no" from "the
// relay lost it". Two release shapes: a permanent decline is released as
// refused (never offered to this device again); a transient one goes back
// with a not-before, because a plain release would be re-claimed at once,
// declined again, and spin.
func (r *Relay) authorGrants(c *call, q *request, who caller, caps []protocol.Capability, granted []store.Claimed) ([]store.Claimed, error) {
	withGrants := []store.Claimed{}
	var refused, returned []protocol.GrantRef
	for _, job := range granted {
		ref := protocol.GrantRef{JobID: job.ID, LeaseID: job.Lease.ID}
		siteID, known := q.proj.SiteIDForKey(job.Site)
		var decision grant.Decision
		if !known {
			// A stub naming a site this projection cannot place. Transient:
			// the projection is what is behind, not the job.
			decision = grant.Decision{Declined: &grant.Decline{Permanent: false, Reason: "unknown-site"}}
		} else {
			var err error
			decision, err = r.cfg.AuthorGrant(c.ctx, grant.Request{
				Job:          job.ClaimedStub,
				SiteID:       siteID,
				SiteKey:      job.Site,
				Purpose:      job.Purpose,
				Owner:        who.owner,
				RunnerID:     who.runnerID,
				Capabilities: caps,
				Projection:   q.proj,
			})
			if err != nil {
				return nil, err
			}
		}
		if decision.Granted == nil {
			permanent := decision.Declined != nil && decision.Declined.Permanent
			reason := ""
			if decision.Declined != nil {
				reason = decision.Declined.Reason
			}
			r.metrics.Declined(reason, permanent)
			r.decide(c, "grant-declined", slog.String("job", job.ID), slog.Bool("permanent", permanent), slog.String("reason", reason))
			if permanent {
				refused = append(refused, ref)
			} else {
				returned = append(returned, ref)
			}
			continue
		}
		r.metrics.Granted()
		r.decide(c, "grant-authored", slog.String("job", job.ID), slog.String("grantId", decision.Granted.GrantID))
		job.Grant = decision.Granted
		withGrants = append(withGrants, job)
	}
	// Released rather than left leased: a job nobody may run here belongs
	// back in the queue for a device whose owner may, not held by a lease
	// that has to time out first.
	if len(refused) > 0 {
		if _, err := r.store.ReleaseLeases(c.ctx, store.ReleaseInput{
			RunnerID: who.runnerID, Leases: refused, Reason: store.ReleaseRefused,
		}); err != nil {
			return nil, err
		}
	}
	if len(returned) > 0 {
		if _, err := r.store.ReleaseLeases(c.ctx, store.ReleaseInput{
			RunnerID: who.runnerID, Leases: returned, RetryAfter: r.now() + store.RetryAfterMs,
		}); err != nil {
			return nil, err
		}
	}
	return withGrants, nil
}
