// Package memory is the site store in one process: the reference
// implementation of the sitestore contract, written to be read as the spec.
// One mutex is the atomicity primitive, as JavaScript's single turn is for
// @byollm/server's MemoryStore: every read-decide-write happens under it.
// Nothing persists; a restart forgets everything.
package memory

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// Options configure a Store.
type Options struct {
	// Clock is the one clock; nil means the host clock.
	Clock clock.Clock
	// DefaultTTLMs is the TTL of a job created without one; 0 means
	// sitestore.DefaultTTLMs.
	DefaultTTLMs int64
}

// Store is the memory site store. Safe for concurrent use.
type Store struct {
	clock      clock.Clock
	defaultTTL int64

	mu       sync.Mutex
	jobs     map[string]sitestore.Job
	runners  map[string]sitestore.Runner
	pairings map[string]sitestore.Pairing // by device code hash
	// checkpoints are by job and lease, apart from the jobs: a checkpoint write
	// never touches a job.
	checkpoints map[checkpointKey]sitestore.Checkpoint

	watchers sitestore.Watchers
}

var (
	_ sitestore.Store    = (*Store)(nil)
	_ sitestore.Resetter = (*Store)(nil)
)

// New returns an empty store.
func New(o Options) *Store {
	s := &Store{clock: o.Clock, defaultTTL: o.DefaultTTLMs}
	if s.clock == nil {
		s.clock = clock.System{}
	}
	if s.defaultTTL == 0 {
		s.defaultTTL = sitestore.DefaultTTLMs
	}
	s.reset()
	return s
}

func (s *Store) reset() {
	s.jobs = map[string]sitestore.Job{}
	s.runners = map[string]sitestore.Runner{}
	s.pairings = map[string]sitestore.Pairing{}
	s.checkpoints = map[checkpointKey]sitestore.Checkpoint{}
}

// Reset drops every job, runner and pairing.
func (s *Store) Reset(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reset()
	return nil
}

func (s *Store) now() int64 { return s.clock.Now().UnixMilli() }

// Now is the store clock.
func (s *Store) Now(context.Context) (int64, error) { return s.now(), nil }

// write is the single write path for a job, so that no mutation can forget
// to notify. Called with mu held; watchers run after it is released.
func (s *Store) write(j sitestore.Job, changed *[]string) {
	if j.Ended() {
		// Dropped with the job's end (sitestore.Job.Ended).
		j.Envelope = protocol.SealedEnvelope{}
	}
	s.jobs[j.ID] = sitestore.CopyJob(j)
	*changed = append(*changed, j.ID)
}

func (s *Store) notify(ids []string) {
	for _, id := range ids {
		s.watchers.Notify(id)
	}
}

// Subscribe registers onChange for the job.
func (s *Store) Subscribe(jobID string, onChange func()) func() {
	return s.watchers.Subscribe(jobID, onChange)
}

// Create stores a job, idempotent by id.
func (s *Store) Create(_ context.Context, in sitestore.CreateInput) (sitestore.Job, error) {
	var changed []string
	defer func() { s.notify(changed) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	if j, ok := s.jobs[in.ID]; ok {
		return sitestore.CopyJob(j), nil
	}
	blocked := false
	for _, d := range in.DependsOn {
		if dep, ok := s.jobs[d]; !ok || dep.State != sitestore.StateOK {
			blocked = true
		}
	}
	j := sitestore.NewJob(in, blocked, s.now(), s.defaultTTL)
	s.write(j, &changed)
	return sitestore.CopyJob(j), nil
}

// Get reads one job.
func (s *Store) Get(_ context.Context, id string) (sitestore.Job, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	return sitestore.CopyJob(j), ok, nil
}

// Refresh sweeps, then reads, as app.job() does.
func (s *Store) Refresh(_ context.Context, id string) (sitestore.Job, bool, error) {
	var changed []string
	defer func() { s.notify(changed) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireDue(s.now(), &changed)
	j, ok := s.jobs[id]
	return sitestore.CopyJob(j), ok, nil
}

// expireDue is ExpireDue with mu held.
func (s *Store) expireDue(now int64, changed *[]string) []sitestore.Job {
	return s.expireDueBefore(now, 0, changed)
}

// expireDueBefore is ExpireDueBefore with mu held.
func (s *Store) expireDueBefore(now, sealedBefore int64, changed *[]string) []sitestore.Job {
	var out []sitestore.Job
	for _, id := range s.sortedIDs() {
		if j, ok := sitestore.ExpireJobBefore(s.jobs[id], now, sealedBefore); ok {
			s.write(j, changed)
			out = append(out, sitestore.CopyJob(j))
		}
	}
	return out
}

// sortedIDs is the job ids in creation order, so every walk is
// deterministic.
func (s *Store) sortedIDs() []string {
	ids := make([]string, 0, len(s.jobs))
	for id := range s.jobs {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		return cmp.Or(cmp.Compare(s.jobs[a].CreatedAt, s.jobs[b].CreatedAt), cmp.Compare(a, b))
	})
	return ids
}

// ExpireDue fires everything due.
func (s *Store) ExpireDue(context.Context) ([]sitestore.Job, error) {
	var changed []string
	defer func() { s.notify(changed) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expireDue(s.now(), &changed), nil
}

// ExpireDueBefore fires everything due, and the sealed jobs whose
// deadline is at or before sealedBefore.
func (s *Store) ExpireDueBefore(_ context.Context, sealedBefore int64) ([]sitestore.Job, error) {
	var changed []string
	defer func() { s.notify(changed) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expireDueBefore(s.now(), sealedBefore, &changed), nil
}

// Claim grants up to Max claimable jobs, oldest claimable first.
func (s *Store) Claim(_ context.Context, in sitestore.ClaimInput) ([]sitestore.Job, error) {
	var changed []string
	defer func() { s.notify(changed) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	// Sweep first so an expired job is never handed out.
	s.expireDue(now, &changed)
	ids := s.sortedIDs()
	slices.SortStableFunc(ids, func(a, b string) int {
		return cmp.Compare(s.jobs[a].ClaimableAt, s.jobs[b].ClaimableAt)
	})
	var out []sitestore.Job
	for _, id := range ids {
		if len(out) >= in.Max {
			break
		}
		j := s.jobs[id]
		if !sitestore.Claimable(j, in, now) {
			continue
		}
		j = sitestore.Grant(j, in.RunnerID, sitestore.NewID(), in.LeaseMs, now)
		s.write(j, &changed)
		out = append(out, sitestore.CopyJob(j))
	}
	return out, nil
}

// RenewLeases extends the leases the runner still holds.
func (s *Store) RenewLeases(_ context.Context, in sitestore.RenewInput) (sitestore.RenewResult, error) {
	var changed []string
	defer func() { s.notify(changed) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expireDue(now, &changed)
	res := sitestore.RenewResult{Renewed: []sitestore.Renewed{}, Lost: []protocol.GrantRef{}}
	for _, g := range in.Leases {
		j, ok := s.jobs[g.JobID]
		if ok {
			j, ok = sitestore.Renew(j, in.RunnerID, g.LeaseID, in.LeaseMs, now)
		}
		if !ok {
			res.Lost = append(res.Lost, g)
			continue
		}
		s.write(j, &changed)
		res.Renewed = append(res.Renewed, sitestore.Renewed{JobID: j.ID, ExpiresAt: j.Lease.ExpiresAt})
	}
	return res, nil
}

// Adopt records a relay-granted lease.
func (s *Store) Adopt(_ context.Context, in sitestore.AdoptInput) (sitestore.Job, bool, error) {
	var changed []string
	defer func() { s.notify(changed) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[in.JobID]
	if !ok {
		return sitestore.Job{}, false, nil
	}
	j, ok = sitestore.Adopt(j, in.LeaseID, in.ExpiresAt, s.now())
	if !ok {
		return sitestore.Job{}, false, nil
	}
	s.write(j, &changed)
	return sitestore.CopyJob(j), true, nil
}

// Complete records a result and, on ok, unblocks dependents in the same
// critical section.
func (s *Store) Complete(_ context.Context, in sitestore.CompleteInput) (sitestore.CompleteResult, error) {
	var changed []string
	defer func() { s.notify(changed) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[in.JobID]
	if !ok {
		return sitestore.CompleteResult{}, nil
	}
	now := s.now()
	j, res, write := sitestore.CompleteJob(j, in, now)
	if !write {
		return res, nil
	}
	s.write(j, &changed)
	if j.State == sitestore.StateOK {
		depOK := func(id string) bool { d, ok := s.jobs[id]; return ok && d.State == sitestore.StateOK }
		for _, id := range s.sortedIDs() {
			d := s.jobs[id]
			if !slices.Contains(d.DependsOn, j.ID) {
				continue
			}
			if d, ok := sitestore.Unblock(d, depOK, now); ok {
				s.write(d, &changed)
			}
		}
	}
	return res, nil
}

// Release requeues the grants the runner names.
func (s *Store) Release(_ context.Context, in sitestore.ReleaseInput) ([]string, error) {
	var changed []string
	defer func() { s.notify(changed) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	released := []string{}
	for _, g := range in.Leases {
		j, ok := s.jobs[g.JobID]
		if !ok {
			continue
		}
		if j, ok = sitestore.Release(j, in.RunnerID, g.LeaseID, in.Reason, now); ok {
			s.write(j, &changed)
			released = append(released, j.ID)
		}
	}
	return released, nil
}

// Cancel cancels or requests cancellation.
func (s *Store) Cancel(_ context.Context, id string) (sitestore.Job, bool, error) {
	var changed []string
	defer func() { s.notify(changed) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok {
		return sitestore.Job{}, false, nil
	}
	if jj, write := sitestore.Cancel(j, s.now()); write {
		j = jj
		s.write(j, &changed)
	}
	return sitestore.CopyJob(j), true, nil
}

// CancelRequests names the cancel requests on the runner's current grants.
func (s *Store) CancelRequests(_ context.Context, runnerID string) ([]protocol.GrantRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []protocol.GrantRef{}
	for _, id := range s.sortedIDs() {
		if g, ok := sitestore.CancelRequestOf(s.jobs[id], runnerID); ok {
			out = append(out, g)
		}
	}
	return out, nil
}

// ClaimedBy lists the jobs the runner holds.
func (s *Store) ClaimedBy(_ context.Context, runnerID string) ([]sitestore.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sitestore.Job
	for _, id := range s.sortedIDs() {
		if j := s.jobs[id]; sitestore.HeldBy(j, runnerID) {
			out = append(out, sitestore.CopyJob(j))
		}
	}
	return out, nil
}

// MarkPublished records the relay's acceptance of the stub.
func (s *Store) MarkPublished(_ context.Context, id string) (sitestore.Job, bool, error) {
	return s.applyOne(id, sitestore.MarkPublished)
}

// Unpublished lists the jobs whose stub must still be published.
func (s *Store) Unpublished(context.Context) ([]sitestore.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []sitestore.Job{}
	for _, id := range s.sortedIDs() {
		if j := s.jobs[id]; j.NeedsPublish() {
			out = append(out, sitestore.CopyJob(j))
		}
	}
	return out, nil
}

// SealTo adopts the relay's lease and records the device, write-ahead.
func (s *Store) SealTo(_ context.Context, in sitestore.SealToInput) (sitestore.Job, bool, error) {
	return s.applyOne(in.JobID, func(j sitestore.Job, now int64) (sitestore.Job, bool) {
		return sitestore.SealTo(j, in, now)
	})
}

// End ends a live job without a device's result.
func (s *Store) End(_ context.Context, in sitestore.EndInput) (sitestore.Job, bool, error) {
	return s.applyOne(in.JobID, func(j sitestore.Job, now int64) (sitestore.Job, bool) {
		return sitestore.EndJob(j, in.Outcome, in.Reason, now)
	})
}

// applyOne applies a rule to one job after what is due for it, and
// reports whether the rule changed it (an expiry alone is written but not
// reported).
func (s *Store) applyOne(id string, rule func(sitestore.Job, int64) (sitestore.Job, bool)) (sitestore.Job, bool, error) {
	var changed []string
	defer func() { s.notify(changed) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok {
		return sitestore.Job{}, false, nil
	}
	now := s.now()
	j, expired := sitestore.ExpireJob(j, now)
	j, applied := rule(j, now)
	if expired || applied {
		s.write(j, &changed)
	}
	return sitestore.CopyJob(j), applied, nil
}

// PutCheckpoint stores cp when its Seq is above the stored one's for the
// same job and lease.
func (s *Store) PutCheckpoint(_ context.Context, jobID, leaseID string, cp sitestore.Checkpoint) (bool, error) {
	if jobID == "" || leaseID == "" || cp.Seq < 1 {
		return false, sitestore.ErrBadCheckpoint
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := checkpointKey{jobID, leaseID}
	if old, ok := s.checkpoints[k]; ok && old.Seq >= cp.Seq {
		return false, nil
	}
	s.checkpoints[k] = cp
	return true, nil
}

// Checkpoint reads the checkpoint of a job's stream under a lease.
func (s *Store) Checkpoint(_ context.Context, jobID, leaseID string) (sitestore.Checkpoint, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cp, ok := s.checkpoints[checkpointKey{jobID, leaseID}]
	return cp, ok, nil
}

// checkpointKey is a checkpoint's job and the lease whose stream it holds.
type checkpointKey struct{ jobID, leaseID string }
