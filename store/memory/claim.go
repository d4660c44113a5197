package memory

import (
	"cmp"
	"context"
	"slices"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// Claim grants work to a device: the filter and the write are one call,
// because a scan the caller follows with per-job writes lets two replicas
// grant the same job. Each job is judged by store.Claimable.
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

	jobs := s.routeJobs(routes)
	// How many grants each pair already sits on unsealed, counted in
	// a pass rather than kept in a counter: a maintained tally needs claim,
	// seal, requeue, forget and complete to agree for ever, and one missed
	// decrement would throttle that pair permanently while looking exactly
	// like a quiet site.
	unsealed := map[store.Route]int{}
	for _, job := range jobs {
		if job.State == store.StateAwaitingPayload {
			unsealed[routeOf(job)]++
		}
	}

	granted := []store.Claimed{}
	for _, job := range jobs {
		if len(granted) >= in.Max {
			break
		}
		if !store.Offerable(job.State) {
			continue
		}
		pair := routeOf(job)
		if _, ok := store.Claimable(candidate(job, in, unsealed[pair]), in, routes, kinds, now); !ok {
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

// routeJobs is the jobs of routes' pairs in enqueue order, the order a
// claim offers them in.
func (s *Store) routeJobs(routes map[store.Route]bool) []*store.Job {
	var entries []routed
	for r := range routes {
		entries = append(entries, s.byRoute[r]...)
	}
	slices.SortFunc(entries, func(a, b routed) int { return cmp.Compare(a.seq, b.seq) })
	jobs := make([]*store.Job, len(entries))
	for i, e := range entries {
		jobs[i] = e.job
	}
	return jobs
}

// candidate is what the claim guards (store.Claimable) read of job;
// pairUnsealed is how many grants the job's pair already sits on unsealed.
func candidate(job *store.Job, in store.ClaimInput, pairUnsealed int) store.Candidate {
	return store.Candidate{
		State: job.State, SiteID: job.SiteID, Owner: job.Stub.Owner, Kind: job.Stub.Kind,
		Audience: job.Stub.Audience, DeadlineAt: job.Stub.DeadlineAt, ReofferTo: job.ReofferTo,
		RefusedBy: job.RefusedBy, RetryAfter: job.RetryAfter[in.RunnerID], Cancelled: job.Cancelled,
		PairFull: pairUnsealed >= store.UnsealedPerPair,
		Stub:     func() (protocol.JobStub, bool) { return job.Stub, true },
	}
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
