package memory

import (
	"context"
	"slices"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// grantFor resolves the job a holder-scoped call is about, without a site.
//
// The exact grant first, checked against the job the caller named: a lease
// id belonging to another job would otherwise hand over that job's payload
// to somebody holding a valid-looking grant. Then the same job id held by
// this runner under another grant, which is what stale-lease is. Then
// nothing: falling back to any job with that id would answer not-holder for
// another tenant's id and not-found for a free one, an existence oracle
// through the holder door.
func (s *Store) grantFor(jobID, runnerID, leaseID string) *store.Job {
	if exact, ok := s.byLease[leaseID]; ok && exact.ID == jobID {
		return exact
	}
	for _, job := range s.byJobID[jobID] {
		if job.ClaimedBy != nil && job.ClaimedBy.RunnerID == runnerID {
			return job
		}
	}
	return nil
}

// holderRefusal is the common prefix of TakePayload and Complete: not-found,
// then not-holder. It returns the job when neither applies.
func (s *Store) holderRefusal(jobID, runnerID, leaseID string) (*store.Job, store.Refusal) {
	job := s.grantFor(jobID, runnerID, leaseID)
	if job == nil {
		return nil, store.RefusedNotFound
	}
	if job.ClaimedBy == nil || job.ClaimedBy.RunnerID != runnerID {
		return nil, store.RefusedNotHolder
	}
	return job, ""
}

// TakePayload hands the payload over and marks the job running in one step:
// running must be set by whoever was told the envelope.
func (s *Store) TakePayload(ctx context.Context, in store.HolderInput) (store.PayloadResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	job, refused := s.holderRefusal(in.JobID, in.RunnerID, in.LeaseID)
	if refused != "" {
		return store.PayloadResult{Refused: refused}, nil
	}
	// LEASE_HONORED per instance: a stale lease names a grant that is over,
	// and answering it would hand work to a previous holder.
	if job.ClaimedBy.LeaseID != in.LeaseID {
		return store.PayloadResult{Refused: store.RefusedStaleLease}, nil
	}
	if job.Payload == nil {
		return store.PayloadResult{Refused: store.RefusedNotReady}, nil
	}
	// Completing does not end the grant, so the checks above pass for a job
	// this runner just finished. A replayed fetch that set running on a done
	// job would hide its result from the site and let the sweep requeue
	// finished work.
	if job.State != store.StateReady && job.State != store.StateRunning {
		return store.PayloadResult{Refused: store.RefusedTerminal}, nil
	}
	job.State = store.StateRunning
	envelope := *job.Payload
	return store.PayloadResult{Envelope: &envelope}, nil
}

// Complete records a result once. RESULT_IDEMPOTENT is decided here, by the
// operation that would have written, or two replicas could both decide they
// were first.
func (s *Store) Complete(ctx context.Context, in store.CompleteInput) (store.CompleteResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	job, refused := s.holderRefusal(in.JobID, in.RunnerID, in.LeaseID)
	if refused != "" {
		return store.CompleteResult{Refused: refused}, nil
	}
	// Past its deadline the job is gone, swept or not (the reference's
	// answer once its sweep has run): a result taken now would be listed to
	// no results poll, accepted at the relay and never delivered.
	if job.Stub.DeadlineAt <= s.now() {
		return store.CompleteResult{Refused: store.RefusedNotFound}, nil
	}
	// Terminal before lease. The two orders disagree only
	// about a done job asked about under another grant; "already recorded"
	// is the useful answer for the grant that finished it, and the argument
	// for signed requests over nonces leans on every write being idempotent,
	// which must not hold by coincidence. Scoped to the finishing grant, so
	// for anyone else a job id is not a terminality probe.
	if job.State == store.StateDone {
		if job.ClaimedBy.LeaseID == in.LeaseID {
			return store.CompleteResult{Accepted: false, Duplicate: true, State: job.State}, nil
		}
		return store.CompleteResult{Refused: store.RefusedStaleLease}, nil
	}
	// LEASE_HONORED per instance: a result produced under a
	// grant that ended is a different device's work arriving late.
	if job.ClaimedBy.LeaseID != in.LeaseID {
		return store.CompleteResult{Refused: store.RefusedStaleLease}, nil
	}
	envelope := in.Envelope
	job.Result = &envelope
	job.Disposition = in.Disposition
	job.State = store.StateDone
	job.DoneAt = s.now()
	return store.CompleteResult{Accepted: true, State: job.State}, nil
}

// ReleaseLeases gives back the grants a runner names.
func (s *Store) ReleaseLeases(ctx context.Context, in store.ReleaseInput) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	released := []string{}
	for _, ref := range in.Leases {
		job := s.grantFor(ref.JobID, in.RunnerID, ref.LeaseID)
		if job == nil || job.ClaimedBy == nil || job.ClaimedBy.RunnerID != in.RunnerID {
			continue
		}
		if job.ClaimedBy.LeaseID != ref.LeaseID {
			continue
		}
		// A finished job is finished. Releasing it would flip it back to
		// queued: the result becomes unreachable (Finished filters on state)
		// and somebody runs the job a second time. The daemon's own shutdown
		// races exactly this: a release and a result for one lease in flight
		// together.
		if job.State == store.StateDone {
			continue
		}
		// Recorded before the requeue, so the job goes back already knowing
		// not to come back here. Only refused means "not me, ever".
		if in.Reason == store.ReleaseRefused && !slices.Contains(job.RefusedBy, in.RunnerID) {
			job.RefusedBy = append(job.RefusedBy, in.RunnerID)
		}
		// Before the requeue for the same reason: never claimable by this
		// runner for the instant in between.
		if in.RetryAfter != 0 {
			if job.RetryAfter == nil {
				job.RetryAfter = map[string]int64{}
			}
			job.RetryAfter[in.RunnerID] = in.RetryAfter
		}
		s.requeue(job)
		released = append(released, ref.JobID)
	}
	return released, nil
}

// CancelRequests names the cancelled jobs this runner holds, by grant: two
// sites may share a job id, and a daemon holding both cannot tell which one
// a bare id means.
func (s *Store) CancelRequests(ctx context.Context, runnerID string) ([]protocol.GrantRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []protocol.GrantRef{}
	for _, job := range s.order {
		if !job.Cancelled || job.ClaimedBy == nil || job.ClaimedBy.RunnerID != runnerID {
			continue
		}
		if job.ClaimedBy.LeaseID == "" {
			continue
		}
		out = append(out, protocol.GrantRef{JobID: job.ID, LeaseID: job.ClaimedBy.LeaseID})
	}
	return out, nil
}

// RenewLeases extends what is still held and names what is not, from one
// read: asked separately, under two replicas, the two answers could differ.
func (s *Store) RenewLeases(ctx context.Context, in store.RenewInput) (store.RenewResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// The store's clock, not the caller's: a lease extended against one
	// replica's clock and swept against another's has no length.
	now := s.now()
	result := store.RenewResult{Renewed: []store.RenewedLease{}, Lost: []protocol.GrantRef{}}
	for _, ref := range in.Leases {
		job := s.grantFor(ref.JobID, in.RunnerID, ref.LeaseID)
		// The lease id and the runner: "this grant, held by you" is the
		// sentence every other holder-scoped operation checks.
		if job == nil || job.ClaimedBy == nil || job.ClaimedBy.LeaseID != ref.LeaseID || job.ClaimedBy.RunnerID != in.RunnerID {
			result.Lost = append(result.Lost, ref)
			continue
		}
		// A grant the sweep would end is over whether or not a sweep has got
		// to it: renewing it would bring a lapsed lease back to life.
		if lapsed(job, now) {
			result.Lost = append(result.Lost, ref)
			continue
		}
		// Replaced rather than mutated in place: callers holding a copy of
		// the old grant keep seeing the old grant.
		held := *job.ClaimedBy
		held.LeaseExpiresAt = now + in.LeaseMs
		job.ClaimedBy = &held
		result.Renewed = append(result.Renewed, store.RenewedLease{JobID: ref.JobID, ExpiresAt: held.LeaseExpiresAt})
	}
	// AwaitingUntil is deliberately untouched: it bounds how long we wait
	// for a site to seal, and a busy device has no bearing on that.
	return result, nil
}
