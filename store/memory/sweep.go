package memory

import (
	"cmp"
	"context"
	"slices"

	"github.com/byorelay/byorelay/store"
)

// Sweep fires whatever the clock says is due and reports it, requeued and
// removed alike: a timeout that fires invisibly is indistinguishable from a
// job never claimed, and a removal nobody reports is a queue that shrinks
// for no visible reason.
func (s *Store) Sweep(ctx context.Context) (store.SweepResult, error) {
	s.mu.Lock()
	result, reports := s.sweepJobs(s.now(), 0)
	s.mu.Unlock()
	s.report(reports)
	return result, nil
}

// SweepInline is Sweep for a request path: at most inlineLimit due jobs,
// earliest due first, so a backlog is drained over many requests instead
// of inside one.
func (s *Store) SweepInline(ctx context.Context) (store.SweepResult, error) {
	s.mu.Lock()
	result, reports := s.sweepJobs(s.now(), s.inlineLimit)
	s.mu.Unlock()
	s.report(reports)
	return result, nil
}

// sweepJobs fires up to limit due jobs (0: all of them). The ones it picks
// are the earliest due, ties in enqueue order; they are fired and reported
// in enqueue order, the reference's, so a bounded sweep that reaches
// everything is indistinguishable from a full one.
func (s *Store) sweepJobs(now int64, limit int) (store.SweepResult, []store.UnsealedChurn) {
	// A notice outlives nothing it could still matter to.
	s.evicted = slices.DeleteFunc(s.evicted, func(e eviction) bool { return e.deadlineAt <= now })
	s.late = slices.DeleteFunc(s.late, func(j *store.Job) bool { return j.Stub.DeadlineAt+store.ResultGraceMs <= now })
	due := []*store.Job{}
	for _, job := range s.order {
		if dueAt(job) <= now {
			due = append(due, job)
		}
	}
	if limit > 0 && len(due) > limit {
		picked := slices.Clone(due)
		// Stable, so equal due times keep enqueue order.
		slices.SortStableFunc(picked, func(a, b *store.Job) int { return cmp.Compare(dueAt(a), dueAt(b)) })
		keep := map[*store.Job]bool{}
		for _, job := range picked[:limit] {
			keep[job] = true
		}
		due = slices.DeleteFunc(due, func(job *store.Job) bool { return !keep[job] })
	}

	result := store.SweepResult{Requeued: []store.Job{}, Removed: []store.Job{}}
	var reports []store.UnsealedChurn
	for _, job := range due {
		switch verdict := store.DecideSweep(sweepFacts(job), now); verdict {
		case store.SweepExpire:
			s.forget(job)
			// Its result, if the site has not taken it, stays listable to
			// a collect for the grace: it may have been accepted an
			// instant before this deadline, after the site's last poll.
			if job.Result != nil && !job.Collected {
				job.Payload = nil
				s.late = append(s.late, job)
			}
		case store.SweepRemove:
			s.forget(job)
			result.Removed = append(result.Removed, copyJob(job))
		case store.SweepReofferUnsealed, store.SweepEvict:
			if report, ok := s.noteChurn(store.Route{SiteID: job.SiteID, Owner: job.Stub.Owner}, now); ok {
				reports = append(reports, report)
			}
			// Set before the requeue, which clears ClaimedBy; never moved
			// once set.
			if job.ClaimedBy != nil && job.ReofferTo == "" {
				job.ReofferTo = job.ClaimedBy.RunnerID
			}
			if verdict == store.SweepEvict {
				s.forget(job)
				s.noteEviction(job)
				result.Removed = append(result.Removed, copyJob(job))
				continue
			}
			job.SealAttempts++
			s.requeue(job)
			result.Requeued = append(result.Requeued, copyJob(job))
		case store.SweepRequeueLapsed:
			s.requeue(job)
			result.Requeued = append(result.Requeued, copyJob(job))
		}
	}
	return result, reports
}

// dueAt is the first instant a sweep has something to do with job: its
// deadline, or sooner its awaiting window or its lease.
func dueAt(job *store.Job) int64 {
	due := job.Stub.DeadlineAt
	switch {
	case job.State == store.StateAwaitingPayload:
		due = min(due, job.AwaitingUntil)
	case job.ClaimedBy != nil && (job.State == store.StateReady || job.State == store.StateRunning):
		due = min(due, job.ClaimedBy.LeaseExpiresAt)
	}
	return due
}

// sweepFacts is what the sweep's rule (store.DecideSweep) reads of job.
func sweepFacts(job *store.Job) store.SweepFacts {
	f := store.SweepFacts{
		State: job.State, DeadlineAt: job.Stub.DeadlineAt, AwaitingUntil: job.AwaitingUntil,
		Claimed: job.ClaimedBy != nil, SealAttempts: job.SealAttempts,
	}
	if job.ClaimedBy != nil {
		f.LeaseExpiresAt = job.ClaimedBy.LeaseExpiresAt
	}
	return f
}

// lapsed says a sweep would end this job's grant or the job itself, whether
// or not one has reached it yet: readers that matter judge this for
// themselves, because an in-line sweep is bounded.
func lapsed(job *store.Job, now int64) bool {
	return dueAt(job) <= now
}

// noteChurn records an unsealed expiry for pair and says whether the pair
// must be reported now: at the crossing of ChurnExpiries inside the window,
// then quiet for ChurnQuietMs, because a walk produces one of these every
// ten seconds and an alert per expiry is an alert somebody filters.
// Nothing is recorded when nobody listens.
func (s *Store) noteChurn(pair store.Route, now int64) (store.UnsealedChurn, bool) {
	if s.onChurn == nil {
		return store.UnsealedChurn{}, false
	}
	seen := slices.DeleteFunc(append(s.churn[pair], now), func(at int64) bool {
		return now-at > store.ChurnWindowMs
	})
	s.churn[pair] = seen
	if len(seen) < store.ChurnExpiries {
		return store.UnsealedChurn{}, false
	}
	if told, ok := s.churnReported[pair]; ok && now-told < store.ChurnQuietMs {
		return store.UnsealedChurn{}, false
	}
	s.churnReported[pair] = now
	return store.UnsealedChurn{
		SiteID:   pair.SiteID,
		Owner:    pair.Owner,
		Expiries: len(seen),
		WindowMs: store.ChurnWindowMs,
	}, true
}

// report hands churn reports to the callback outside the lock (the callback
// may call back into the store). A report is evidence about the sweep, not
// part of it: a panicking reporter must not take the sweep's caller down.
func (s *Store) report(reports []store.UnsealedChurn) {
	for _, r := range reports {
		func() {
			defer func() { _ = recover() }()
			s.onChurn(r)
		}()
	}
}

// noteEviction leaves the site a notice of job's eviction, replacing an
// older one for the same id (a job published again and evicted again).
func (s *Store) noteEviction(job *store.Job) {
	k := jobKey{job.SiteID, job.ID}
	s.evicted = slices.DeleteFunc(s.evicted, func(e eviction) bool { return e.key == k })
	s.evicted = append(s.evicted, eviction{k, job.Stub.DeadlineAt})
}
