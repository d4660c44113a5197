package memory

import (
	"context"
	"slices"

	"github.com/byorelay/byorelay/store"
)

// Sweep fires whatever the clock says is due and reports it, requeued and
// removed alike: a timeout that fires invisibly is indistinguishable from a
// job never claimed, and a removal nobody reports is a queue that shrinks
// for no visible reason (B096).
func (s *Store) Sweep(ctx context.Context) (store.SweepResult, error) {
	s.mu.Lock()
	result, reports := s.sweepJobs(s.now())
	s.mu.Unlock()
	s.report(reports)
	return result, nil
}

// sweep is Sweep for a caller already holding the lock (Claim sweeps first).
func (s *Store) sweep(now int64) []store.UnsealedChurn {
	_, reports := s.sweepJobs(now)
	return reports
}

func (s *Store) sweepJobs(now int64) (store.SweepResult, []store.UnsealedChurn) {
	result := store.SweepResult{Requeued: []store.Job{}, Removed: []store.Job{}}
	var reports []store.UnsealedChurn
	for _, job := range slices.Clone(s.order) {
		// Past its deadline (TTL_EXPIRY), in any state. Dropped rather than
		// marked terminal: the site holds the authoritative record, and a
		// tombstone would keep the ciphertext with it. A daemon mid-flight
		// learns through RenewLeases, which reports the job lost.
		if job.Stub.DeadlineAt <= now {
			s.forget(job)
			result.Removed = append(result.Removed, copyJob(job))
			continue
		}
		if job.State == store.StateAwaitingPayload && job.AwaitingUntil <= now {
			// A grant this pair took and did not seal: B187's signature.
			if report, ok := s.noteChurn(store.Route{SiteID: job.SiteID, Owner: job.Stub.Owner}, now); ok {
				reports = append(reports, report)
			}
			// From here it is that device's job or nobody's. Set before the
			// requeue, which clears ClaimedBy; never moved once set.
			if job.ClaimedBy != nil && job.ReofferTo == "" {
				job.ReofferTo = job.ClaimedBy.RunnerID
			}
			// Counted before the requeue and evicted once spent (B042): after
			// three it is no longer patience, it is a queue handing the same
			// dead job around.
			attempts := job.SealAttempts + 1
			if attempts >= store.SealAttemptsBeforeEviction {
				s.forget(job)
				result.Removed = append(result.Removed, copyJob(job))
				continue
			}
			job.SealAttempts = attempts
			s.requeue(job)
			result.Requeued = append(result.Requeued, copyJob(job))
		}
		// The lease governs only jobs the site has sealed; an unsealed one is
		// governed by AwaitingUntil alone.
		if job.ClaimedBy != nil && (job.State == store.StateReady || job.State == store.StateRunning) && job.ClaimedBy.LeaseExpiresAt <= now {
			s.requeue(job)
			result.Requeued = append(result.Requeued, copyJob(job))
		}
	}
	return result, reports
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
