package dynamo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// grantFor resolves the job a holder-scoped call is about, without a site:
// the job whose current lease is leaseID if its id is jobID, else a job with
// that id on any site held by this runner (stale-lease), else nil
// (not-found).
//
// Almost every call names its current grant: the lease id names the site
// (lease.go), so that is one strongly consistent read of the job, which
// answers at the instant it is read. Anything else (a lease that ended, a
// job this runner does not hold, an id that is not one of ours) reads the
// runner's holder hints for this job id and then the jobs they name.
func (s *Store) grantFor(ctx context.Context, jobID, runnerID, leaseID string) (*jobItem, error) {
	site, err := s.leaseSite(ctx, leaseID)
	if err != nil {
		return nil, err
	}
	var named *jobItem
	if site != "" {
		j, ok, err := s.readJob(ctx, jobPK(site, jobID))
		if err != nil {
			return nil, fmt.Errorf("resolve grant: %w", err)
		}
		if ok && j.Lease == leaseID {
			return j, nil
		}
		if ok {
			named = j
		}
	}
	return s.heldByRunner(ctx, jobID, runnerID, site, named)
}

// heldByRunner is a job with this id that runnerID holds, the first in
// enqueue order as the reference walks its list, or nil. named is the job
// on the lease's own site, already read (or nil). Every job a hint names is
// read strongly consistently and judged by what it holds now; a job held by
// this runner always has a hint, because the claim writes the hint before
// the grant.
func (s *Store) heldByRunner(ctx context.Context, jobID, runnerID, namedSite string, named *jobItem) (*jobItem, error) {
	sites, err := s.hintedSites(ctx, runnerID, jobID)
	if err != nil {
		return nil, err
	}
	var pks []string
	for _, site := range sites {
		if site != namedSite {
			pks = append(pks, jobPK(site, jobID))
		}
	}
	jobs, err := s.batchJobs(ctx, pks)
	if err != nil {
		return nil, fmt.Errorf("resolve grant: %w", err)
	}
	if named != nil {
		jobs = append(jobs, named)
	}
	var held []*jobItem
	for _, j := range jobs {
		if j.claimed() && j.Runner == runnerID {
			held = append(held, j)
		}
	}
	if len(held) == 0 {
		return nil, nil
	}
	slices.SortFunc(held, func(a, b *jobItem) int { return strings.Compare(a.Seq, b.Seq) })
	return held[0], nil
}

// holderRefusal is the common prefix of TakePayload and Complete.
func holderRefusal(j *jobItem, runnerID string) store.Refusal {
	if j == nil {
		return store.RefusedNotFound
	}
	if !j.claimed() || j.Runner != runnerID {
		return store.RefusedNotHolder
	}
	return ""
}

// TakePayload hands the payload to the holder and marks the job running, in
// one conditional write: running must be set by whoever was told the
// envelope.
//
// Its write leaves no mark (jobWrite.mine), unlike a seal's, a
// completion's or a release's: deciding again on its own write gives the
// answer the write would have. When an ambiguous error's read-back finds
// the wid written over (a renewal, a cancel), commit answers lostRace and
// the loop reads the job again: running under this lease, it answers the
// envelope with no second write; moved on (requeued by a sweep, granted
// again), the grant is over and the refusal is the true answer, landed or
// not. A mark would only be needed if that re-decision could refuse a
// fetch whose write landed, which a repeat while running cannot.
func (s *Store) TakePayload(ctx context.Context, in store.HolderInput) (store.PayloadResult, error) {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		j, err := s.grantFor(ctx, in.JobID, in.RunnerID, in.LeaseID)
		if err != nil {
			return store.PayloadResult{}, err
		}
		if r := holderRefusal(j, in.RunnerID); r != "" {
			return store.PayloadResult{Refused: r}, nil
		}
		// LEASE_HONORED per instance: a stale lease names a grant that is
		// over, and answering it would hand work to a previous holder.
		if j.Lease != in.LeaseID {
			return store.PayloadResult{Refused: store.RefusedStaleLease}, nil
		}
		if j.Payload == "" && j.PayloadItem == "" && j.PayloadS3 == "" {
			return store.PayloadResult{Refused: store.RefusedNotReady}, nil
		}
		// A replayed fetch on a done job must not set it running again: the
		// site would stop seeing its result and the sweep would requeue
		// finished work (V1-6).
		if j.State != string(store.StateReady) && j.State != string(store.StateRunning) {
			return store.PayloadResult{Refused: store.RefusedTerminal}, nil
		}
		if err := s.loadEnvelopes(ctx, j); errors.Is(err, errEnvelopeGone) {
			continue
		} else if err != nil {
			return store.PayloadResult{}, err
		}
		env, err := inlineOr(j.Payload, nil, j.payload)
		if err != nil {
			return store.PayloadResult{}, err
		}
		if j.State == string(store.StateRunning) {
			return store.PayloadResult{Envelope: env}, nil
		}
		next := *j
		next.State = string(store.StateRunning)
		out, _, err := s.commit(ctx, jobWrite{pk: j.PK, put: &next, ver: j.Ver})
		if err != nil {
			return store.PayloadResult{}, err
		}
		if out == committed {
			return store.PayloadResult{Envelope: env}, nil
		}
	}
	return store.PayloadResult{}, ErrContention
}

// Complete records a result once. The replay answer is decided by the same
// conditional write that would have recorded it.
func (s *Store) Complete(ctx context.Context, in store.CompleteInput) (store.CompleteResult, error) {
	var env storedEnvelope
	stored := false
	defer func() {
		if !stored {
			s.dropObjects(context.WithoutCancel(ctx), env.s3Key)
		}
	}()
	for attempt := 0; attempt < maxAttempts; attempt++ {
		j, err := s.grantFor(ctx, in.JobID, in.RunnerID, in.LeaseID)
		if err != nil {
			return store.CompleteResult{}, err
		}
		if r := holderRefusal(j, in.RunnerID); r != "" {
			return store.CompleteResult{Refused: r}, nil
		}
		// Past its deadline the job is gone, swept or not (the reference's
		// answer once its sweep has run): a result taken now would be
		// listed to no results poll, accepted and never delivered.
		if j.Deadline <= s.now() {
			return store.CompleteResult{Refused: store.RefusedNotFound}, nil
		}
		// Terminal before lease, after holder: the grant that finished the
		// job is told "already recorded", anyone else gets the refusal they
		// would get for a job that is not terminal.
		if j.State == string(store.StateDone) {
			if j.Lease == in.LeaseID {
				return store.CompleteResult{Accepted: false, Duplicate: true, State: store.StateDone}, nil
			}
			return store.CompleteResult{Refused: store.RefusedStaleLease}, nil
		}
		if j.Lease != in.LeaseID {
			return store.CompleteResult{Refused: store.RefusedStaleLease}, nil
		}
		if env.empty() {
			if env, err = s.putEnvelope(ctx, j, "result", in.Envelope); err != nil {
				return store.CompleteResult{}, err
			}
			// A done job leaves the due index, so something that stays on
			// it must bring the sweep back at its end to delete the result:
			// its payload item, or the end hook that any S3 object already
			// wrote. Without either, the hook is written now, before the
			// result lands.
			if j.PayloadItem == "" && j.PayloadS3 == "" && env.s3Key == "" {
				if err := s.noteEnd(ctx, j, "", ""); err != nil {
					return store.CompleteResult{}, err
				}
			}
		}
		next := *j
		next.Result, next.ResultC, next.ResultS3 = env.inline, env.inlineC, env.s3Key
		next.Disposition = string(in.Disposition)
		next.State = string(store.StateDone)
		next.DoneAt = s.now()
		// A renewal or a cancel may write the done job before a lost
		// acknowledgement's read-back: the mark still says this call
		// recorded the result, which, decided again, it would answer
		// "duplicate" (and drop the S3 object the job now names).
		mark := newMark()
		next.DoneMark = mark
		out, _, err := s.commit(ctx, jobWrite{pk: j.PK, put: &next, ver: j.Ver, unsealed: unsealed(j),
			mine: func(j *jobItem) bool { return j.DoneMark == mark }})
		if err != nil {
			return store.CompleteResult{}, err
		}
		if out == committed {
			stored = true
			return store.CompleteResult{Accepted: true, State: store.StateDone}, nil
		}
	}
	return store.CompleteResult{}, ErrContention
}

// ReleaseLeases gives back the grants a runner names, each in its own
// write (a transaction with the pair's slot when the grant was unsealed).
func (s *Store) ReleaseLeases(ctx context.Context, in store.ReleaseInput) ([]string, error) {
	released := []string{}
	for _, ref := range in.Leases {
		ok, err := s.release(ctx, in, ref)
		if err != nil {
			return nil, err
		}
		if ok {
			released = append(released, ref.JobID)
		}
	}
	return released, nil
}

func (s *Store) release(ctx context.Context, in store.ReleaseInput, ref protocol.GrantRef) (bool, error) {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		j, err := s.grantFor(ctx, ref.JobID, in.RunnerID, ref.LeaseID)
		if err != nil {
			return false, err
		}
		if j == nil || !j.claimed() || j.Runner != in.RunnerID || j.Lease != ref.LeaseID {
			return false, nil
		}
		// A release must never un-finish a job: the recorded result would
		// become unreachable and somebody would run the job again.
		if j.State == string(store.StateDone) {
			return false, nil
		}
		next := *j
		// Both recorded before the requeue, so the job goes back already
		// knowing. Only refused means "not me, ever".
		if in.Reason == store.ReleaseRefused && !slices.Contains(j.RefusedBy, in.RunnerID) {
			next.RefusedBy = append(slices.Clone(j.RefusedBy), in.RunnerID)
		}
		if in.RetryAfter != 0 {
			next.RetryAfter = map[string]int64{}
			for k, v := range j.RetryAfter {
				next.RetryAfter[k] = v
			}
			next.RetryAfter[in.RunnerID] = in.RetryAfter
		}
		next.requeue()
		// Another runner may claim the job before a lost acknowledgement's
		// read-back: the mark still says this call let it go, which,
		// decided again, it would answer not released.
		mark := newMark()
		next.ReleaseMark = mark
		out, _, err := s.commit(ctx, jobWrite{pk: j.PK, put: &next, ver: j.Ver, unsealed: unsealed(j),
			mine: func(j *jobItem) bool { return j.ReleaseMark == mark }})
		if err != nil {
			return false, err
		}
		if out == committed {
			s.dropObjects(context.WithoutCancel(ctx), j.PayloadS3)
			s.dropPayloadItem(context.WithoutCancel(ctx), j)
			return true, nil
		}
	}
	return false, ErrContention
}

// RenewLeases extends the leases the runner still holds. now is read once.
// Each lease is its own conditional write; a lease that lost its grant
// between the read and the write is decided again, so Lost and Renewed
// each describe a state that existed.
func (s *Store) RenewLeases(ctx context.Context, in store.RenewInput) (store.RenewResult, error) {
	now := s.now()
	result := store.RenewResult{Renewed: []store.RenewedLease{}, Lost: []protocol.GrantRef{}}
	for _, ref := range in.Leases {
		expiresAt, ok, err := s.renew(ctx, in, ref, now)
		if err != nil {
			return store.RenewResult{}, err
		}
		if ok {
			result.Renewed = append(result.Renewed, store.RenewedLease{JobID: ref.JobID, ExpiresAt: expiresAt})
		} else {
			result.Lost = append(result.Lost, ref)
		}
	}
	return result, nil
}

func (s *Store) renew(ctx context.Context, in store.RenewInput, ref protocol.GrantRef, now int64) (int64, bool, error) {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		j, err := s.grantFor(ctx, ref.JobID, in.RunnerID, ref.LeaseID)
		if err != nil {
			return 0, false, err
		}
		if j == nil || !j.claimed() || j.Lease != ref.LeaseID || j.Runner != in.RunnerID {
			return 0, false, nil
		}
		// A grant the sweep would end is over whether or not a sweep has
		// got to it: renewing it would bring a lapsed lease back to life.
		if j.nextDeadline() <= now {
			return 0, false, nil
		}
		next := *j
		next.LeaseExp = now + in.LeaseMs
		// AwaitingUntil is deliberately untouched: it bounds how long we
		// wait for a site, and a busy device has no bearing on that.
		out, _, err := s.commit(ctx, jobWrite{pk: j.PK, put: &next, ver: j.Ver})
		if err != nil {
			return 0, false, err
		}
		if out == committed {
			return next.LeaseExp, true, nil
		}
	}
	return 0, false, ErrContention
}
