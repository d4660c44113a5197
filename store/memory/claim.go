package memory

import (
	"context"
	"slices"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// Claim grants work to a device: the filter and the write are one call,
// because a scan the caller follows with per-job writes lets two replicas
// grant the same job. Each job is judged by claimable.
func (s *Store) Claim(ctx context.Context, in store.ClaimInput) ([]store.Claimed, error) {
	s.mu.Lock()
	now := s.now()
	_, reports := s.sweepJobs(now, s.inlineLimit)
	granted := s.claim(now, in)
	s.mu.Unlock()
	s.report(reports)
	return granted, nil
}

func (s *Store) claim(now int64, in store.ClaimInput) []store.Claimed {
	routes := map[store.Route]bool{}
	for _, r := range in.Routes {
		routes[r] = true
	}
	kinds := map[string]bool{}
	for _, k := range in.Kinds {
		kinds[k] = true
	}

	// How many grants each pair already sits on unsealed, counted in
	// a pass rather than kept in a counter: a maintained tally needs claim,
	// seal, requeue, forget and complete to agree for ever, and one missed
	// decrement would throttle that pair permanently while looking exactly
	// like a quiet site.
	unsealed := map[store.Route]int{}
	for _, job := range s.order {
		if job.State == store.StateAwaitingPayload {
			unsealed[store.Route{SiteID: job.SiteID, Owner: job.Stub.Owner}]++
		}
	}

	granted := []store.Claimed{}
	for _, job := range s.order {
		if len(granted) >= in.Max {
			break
		}
		pair := store.Route{SiteID: job.SiteID, Owner: job.Stub.Owner}
		if !claimable(job, in, routes, kinds, unsealed[pair], now) {
			continue
		}
		// One more unsealed grant for this pair, so a later job in the same
		// batch sees the cap; without it Max 10 would hand a non-sealing site
		// ten devices in one call.
		unsealed[pair]++
		granted = append(granted, s.grant(job, in, now))
	}
	return granted
}

// claimable is whether the device may take the job now; pairUnsealed is
// how many grants the job's pair already sits on unsealed. The guards run
// cheapest first, in the reference order.
func claimable(job *store.Job, in store.ClaimInput, routes map[store.Route]bool, kinds map[string]bool, pairUnsealed int, now int64) bool {
	if job.State != store.StateQueued {
		return false
	}
	// Past its deadline and not yet reached by the bounded sweep: never
	// offered, because nobody may run it.
	if job.Stub.DeadlineAt <= now {
		return false
	}
	// The route as one lookup, because consent is about the pair.
	if !routes[store.Route{SiteID: job.SiteID, Owner: job.Stub.Owner}] {
		return false
	}
	// Abandoned once, so it goes back only to the device that answered
	// for it (the sticky re-offer). Before the cap, so a job this
	// device may not have does not spend its budget on the way to being
	// skipped.
	if job.ReofferTo != "" && job.ReofferTo != in.RunnerID {
		return false
	}
	// Already holding its share unsealed. Left queued rather than
	// refused: the work is legitimate, it is the rate of unsealed grants
	// that is bounded, and the next claim after a seal takes it.
	if pairUnsealed >= store.UnsealedPerPair {
		return false
	}
	// By kind and only by kind: which service answers is the control
	// plane's, resolved from a mapping a relay must not hold.
	if !kinds[job.Stub.Kind] {
		return false
	}
	// Already declined by this device: REFUSAL_NOT_REOFFERED.
	if slices.Contains(job.RefusedBy, in.RunnerID) {
		return false
	}
	// Declined for something that may have changed since, but not yet.
	if job.RetryAfter[in.RunnerID] > now {
		return false
	}
	// Withdrawn by the site.
	if job.Cancelled {
		return false
	}
	// The relay's half of AUDIENCE_BOTH_SIDES: routes include every
	// roster member a Team owner's machine may serve, which is right for
	// team work and wrong for the audience a user picks because they want
	// their own machine.
	if job.Stub.Audience == "private" && job.Stub.Owner != in.Owner {
		return false
	}
	return !job.Stub.Streaming || in.Streams
}

// grant hands the job to the claiming device, awaiting the site's payload.
func (s *Store) grant(job *store.Job, in store.ClaimInput, now int64) store.Claimed {
	leaseID := store.NewLeaseID()
	job.State = store.StateAwaitingPayload
	job.ClaimedBy = &store.Holder{
		RunnerID:       in.RunnerID,
		Owner:          in.Owner,
		Device:         in.Device,
		LeaseID:        leaseID,
		LeaseExpiresAt: now + in.LeaseMs,
	}
	// Not the lease: this bounds how long we wait for the site.
	job.AwaitingUntil = now + s.awaitingMs
	s.byLease[leaseID] = job
	return store.Claimed{
		ClaimedStub: protocol.Claimed(job.Stub, protocol.Lease{
			ID:        leaseID,
			RunnerID:  in.RunnerID,
			ExpiresAt: job.ClaimedBy.LeaseExpiresAt,
		}, nil),
		AwaitingUntil: job.AwaitingUntil,
	}
}
