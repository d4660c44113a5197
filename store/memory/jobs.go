package memory

import (
	"cmp"
	"context"
	"slices"

	"github.com/byorelay/byorelay/store"
)

// Enqueue is idempotent by (site, id): a known job is returned unchanged, so
// a replayed or republished enqueue cannot discard a live claim, its lease,
// or a payload already sealed to a device.
func (s *Store) Enqueue(ctx context.Context, in store.EnqueueInput) (store.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := jobKey{in.SiteID, in.ID}
	if existing, ok := s.jobs[key]; ok {
		return copyJob(existing), nil
	}
	job := &store.Job{
		ID:        in.ID,
		SiteID:    in.SiteID,
		Stub:      in.Stub,
		State:     store.StateQueued,
		RefusedBy: []string{},
	}
	s.jobs[key] = job
	s.order = append(s.order, job)
	s.enqueued++
	s.byRoute[routeOf(job)] = append(s.byRoute[routeOf(job)], routed{seq: s.enqueued, job: job})
	s.byJobID[job.ID] = append(s.byJobID[job.ID], job)
	return copyJob(job), nil
}

// Job finds a job by the site that published it, never by bare id.
func (s *Store) Job(ctx context.Context, siteID, jobID string) (store.Job, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	job, ok := s.jobs[jobKey{siteID, jobID}]
	if !ok {
		return store.Job{}, false, nil
	}
	return copyJob(job), true, nil
}

// Jobs lists every job in enqueue order.
func (s *Store) Jobs(ctx context.Context) ([]store.Job, error) {
	return s.list(func(*store.Job) bool { return true }, copyJob), nil
}

// QueuedFor lists up to limit of owner's queued jobs at siteID, oldest
// first (store.QueuedLister).
func (s *Store) QueuedFor(ctx context.Context, siteID, owner string, limit int) ([]store.Job, error) {
	now := s.now()
	out := s.list(func(j *store.Job) bool {
		return j.SiteID == siteID && j.Stub.Owner == owner && j.State == store.StateQueued && j.Stub.DeadlineAt > now
	}, copyJob)
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Awaiting lists the site's jobs it must seal for, leaving out claims that
// have lapsed but that no sweep has reached: a site must not seal to a
// device whose claim is over.
func (s *Store) Awaiting(ctx context.Context, siteID string) ([]store.Job, error) {
	now := s.now()
	return s.list(func(j *store.Job) bool {
		return j.SiteID == siteID && j.State == store.StateAwaitingPayload && !lapsed(j, now)
	}, copyJob), nil
}

// Finished lists the site's sealed results waiting to go home, without
// their payloads (store.Store allows it): every poll lists every one of
// them, and a copy of each payload was one allocation per listed job per
// poll that no caller reads. With a grace, the results the sweep forgot
// within it come after the live ones.
func (s *Store) Finished(ctx context.Context, siteID string, graceMs int64) ([]store.Job, error) {
	now := s.now()
	listed := func(j *store.Job) bool {
		return j.SiteID == siteID && j.State == store.StateDone && j.Result != nil && !j.Collected &&
			j.Stub.DeadlineAt+graceMs > now
	}
	withoutPayload := func(j *store.Job) store.Job {
		c := *j
		c.Payload = nil
		return copyJob(&c)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	matched := s.matching(listed)
	if graceMs > 0 {
		for _, j := range s.late {
			if _, heldAgain := s.jobs[jobKey{j.SiteID, j.ID}]; listed(j) && !heldAgain {
				matched = append(matched, j)
			}
		}
	}
	return copies(matched, withoutPayload), nil
}

// ResultsPage is the GET results page (store.RoutingStore.ResultsPage):
// the fresh window newest first, then the rotation, in enqueue order.
func (s *Store) ResultsPage(ctx context.Context, siteID string, limit int) ([]store.Job, error) {
	limit = max(limit, 2)
	rotated := store.ResultsRotated(limit)
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	all := s.matching(func(j *store.Job) bool {
		return j.SiteID == siteID && j.State == store.StateDone && j.Result != nil && !j.Collected &&
			j.Stub.DeadlineAt > now
	})
	withoutPayload := func(j *store.Job) store.Job {
		c := *j
		c.Payload = nil
		return copyJob(&c)
	}
	var page []*store.Job
	for _, j := range all {
		if j.DoneAt > now-store.ResultsFreshMs {
			page = append(page, j)
		}
	}
	slices.SortStableFunc(page, func(a, b *store.Job) int { return cmp.Compare(b.DoneAt, a.DoneAt) })
	// The newest limit - rotated, and every one of the last
	// ResultsRecentMs beyond them up to ResultsRecentMax.
	keep := min(len(page), limit-rotated)
	for keep < len(page) && keep < store.ResultsRecentMax && page[keep].DoneAt > now-store.ResultsRecentMs {
		keep++
	}
	page = page[:keep]
	fresh := len(page)

	at, placed := s.rotation[siteID]
	start := 0
	if at.after != "" {
		if i := slices.IndexFunc(all, func(j *store.Job) bool { return j.ID == at.after }); i >= 0 {
			start = i + 1
		}
	}
	// The rotation lists on from where it stands up to rotated results the
	// window did not, as the DynamoDB store's does.
	i, added := start, 0
	for ; i < len(all); i++ {
		if slices.Contains(page[:fresh], all[i]) {
			continue
		}
		if added == rotated {
			break
		}
		page = append(page, all[i])
		added++
	}
	next := "" // past the end: the next move starts over
	if i < len(all) {
		next = all[i-1].ID
	}
	if next != at.after && (!placed || store.ResultsRotationMoves(at.movedAt, now)) {
		if s.rotation == nil {
			s.rotation = map[string]rotationPlace{}
		}
		s.rotation[siteID] = rotationPlace{after: next, movedAt: now}
	}
	return copies(page, withoutPayload), nil
}

// rotationPlace is where a site's results rotation stands: after the job
// with id after ("" for the start), moved there at movedAt (store clock,
// ms), which store.ResultsRotationMoves reads.
type rotationPlace struct {
	after   string
	movedAt int64
}

// Evicted lists the site's eviction notices still due to it.
func (s *Store) Evicted(ctx context.Context, siteID string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := []string{}
	for _, e := range s.evicted {
		_, heldAgain := s.jobs[e.key]
		if e.key.siteID == siteID && e.deadlineAt > now && !heldAgain {
			out = append(out, e.key.jobID)
		}
	}
	return out, nil
}

// Collect marks the site's done jobs collected and drops its notices.
func (s *Store) Collect(ctx context.Context, siteID string, jobIDs []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	taken := map[jobKey]bool{}
	for _, id := range jobIDs {
		k := jobKey{siteID, id}
		taken[k] = true
		if job, ok := s.jobs[k]; ok && job.State == store.StateDone {
			job.Collected = true
		}
	}
	// Notices past their deadline go too: nothing reads them any more.
	s.evicted = slices.DeleteFunc(s.evicted, func(e eviction) bool { return taken[e.key] || e.deadlineAt <= now })
	s.late = slices.DeleteFunc(s.late, func(j *store.Job) bool { return taken[jobKey{j.SiteID, j.ID}] })
	return nil
}

func (s *Store) list(keep func(*store.Job) bool, copyJob func(*store.Job) store.Job) []store.Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	return copies(s.matching(keep), copyJob)
}

// matching is the held jobs keep accepts, in order; s.mu must be held.
func (s *Store) matching(keep func(*store.Job) bool) []*store.Job {
	var matched []*store.Job
	for _, job := range s.order {
		if keep(job) {
			matched = append(matched, job)
		}
	}
	return matched
}

// copies copies the matches into one slice: a site's results list holds
// hundreds of done jobs on every poll, and growing a slice of Jobs by
// appending copied each of them several times over.
func copies(matched []*store.Job, copyJob func(*store.Job) store.Job) []store.Job {
	out := make([]store.Job, len(matched))
	for i, job := range matched {
		out[i] = copyJob(job)
	}
	return out
}

// Seal takes a site's payload. Only awaiting-payload accepts one: a late seal
// must not land on a claim that has moved, which is what makes the
// awaiting-payload timeout mean something.
func (s *Store) Seal(ctx context.Context, in store.SealInput) (store.SealResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	job, ok := s.jobs[jobKey{in.SiteID, in.JobID}]
	if !ok {
		return store.SealResult{Refused: store.RefusedNotFound}, nil
	}
	if job.State != store.StateAwaitingPayload {
		return store.SealResult{Refused: store.RefusedTooLate, Was: job.State}, nil
	}
	envelope := in.Envelope
	job.Payload = &envelope
	job.State = store.StateReady
	job.AwaitingUntil = 0
	// The site sealed, so the count of devices that waited in vain resets:
	// it measures consecutive failures to seal, and without this a
	// job requeued twice for ordinary lease lapses would be evicted for a
	// payload problem it does not have. ReofferTo stays: the site already
	// abandoned a grant on this job once.
	job.SealAttempts = 0
	return store.SealResult{State: job.State}, nil
}

// Cancel flags a site's job. Scoped to the caller's site: a site must not
// cancel somebody else's work by guessing an id. Not deleted and not
// requeued: a device holding it has to hear about it first.
func (s *Store) Cancel(ctx context.Context, siteID, jobID string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	job, ok := s.jobs[jobKey{siteID, jobID}]
	if !ok {
		return false, nil
	}
	job.Cancelled = true
	return true, nil
}

// requeue returns a job to the queue, forgetting the claim. The stub
// survives, which is LEASE_RECLAIMABLE and why the awaiting-payload timeout
// is cheap to fire.
func (s *Store) requeue(job *store.Job) {
	job.State = store.StateQueued
	// The grant ended; the index naming it must end with it, or a stale lease
	// id resolves to a job it no longer holds.
	if job.ClaimedBy != nil {
		delete(s.byLease, job.ClaimedBy.LeaseID)
	}
	job.ClaimedBy = nil
	job.AwaitingUntil = 0
	job.Payload = nil
	// SealAttempts, ReofferTo, RefusedBy, RetryAfter and Cancelled are kept:
	// the requeue is exactly what the first two have to outlive, or the
	// counter resets every tick and the job is handed round forever.
}

// forget deletes a job from every index, ciphertext included.
func (s *Store) forget(job *store.Job) {
	delete(s.jobs, jobKey{job.SiteID, job.ID})
	s.order = slices.DeleteFunc(s.order, func(j *store.Job) bool { return j == job })
	route := routeOf(job)
	if left := slices.DeleteFunc(s.byRoute[route], func(r routed) bool { return r.job == job }); len(left) == 0 {
		delete(s.byRoute, route)
	} else {
		s.byRoute[route] = left
	}
	bare := slices.DeleteFunc(s.byJobID[job.ID], func(j *store.Job) bool { return j == job })
	if len(bare) == 0 {
		delete(s.byJobID, job.ID)
	} else {
		s.byJobID[job.ID] = bare
	}
	if job.ClaimedBy != nil && s.byLease[job.ClaimedBy.LeaseID] == job {
		delete(s.byLease, job.ClaimedBy.LeaseID)
	}
}
