package storetest

import (
	"github.com/byorelay/byorelay/store"
)

// evict runs job id through SealAttemptsBeforeEviction unsealed windows.
func (e *env) evict(id string) {
	e.Helper()
	in := claimArgs()
	in.Max = 1
	for range store.SealAttemptsBeforeEviction {
		e.claimOne(in, id)
		e.advance(store.AwaitingPayloadMs)
		e.sweep()
	}
	e.wantAbsent(site, id)
}

func (e *env) evicted(siteID string) []string {
	e.Helper()
	ids, err := e.s.Evicted(e.ctx, siteID)
	e.check(err)
	return ids
}

func (e *env) collect(siteID string, ids ...string) {
	e.Helper()
	e.check(e.s.Collect(e.ctx, siteID, ids))
}

func (e *env) finishedIDs(siteID string) []string {
	e.Helper()
	done, err := e.s.Finished(e.ctx, siteID, 0)
	e.check(err)
	return jobIDs(done)
}

// fatesCases are byorelay's additions for a site that must learn every
// job's fate: eviction notices, and collecting what it has taken.
var fatesCases = []testCase{
	{"a collected result leaves the site's list and a replayed result is still a duplicate", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		e.enqueue(site, stub("b", "alice"))
		in := claimArgs()
		in.Max = 1
		for _, id := range []string{"a", "b"} {
			granted := e.claimOne(in, id)
			e.seal(id)
			e.take(id, "runner_1", granted.Lease.ID)
			e.complete(id, "runner_1", granted.Lease.ID, "answer-"+id, store.DispositionOK)
		}
		e.same("before", e.finishedIDs(site), []string{"a", "b"})
		e.collect(site, "a")
		e.collect(site, "a") // idempotent
		e.same("after", e.finishedIDs(site), []string{"b"})
		a := e.mustJob(site, "a")
		e.same("collected", a.Collected, true)
		e.same("still done", a.State, store.StateDone)
		replay := e.complete("a", "runner_1", a.ClaimedBy.LeaseID, "answer-a", store.DispositionOK)
		e.same("replay", replay, store.CompleteResult{Accepted: false, Duplicate: true, State: store.StateDone})
	}},

	{"collect ignores another site's jobs, jobs not done and unknown ids", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		e.enqueue("other-site", stub("b", "alice"))
		e.collect(site, "a", "b", "nope")
		e.collect("other-site", "a")
		e.same("queued job untouched", e.mustJob(site, "a").Collected, false)
		e.wantState(site, "a", store.StateQueued)
		e.same("other site's job untouched", e.mustJob("other-site", "b").Collected, false)
	}},

	{"an eviction leaves a notice for its site until the site collects it", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		e.same("none yet", e.evicted(site), []string{})
		e.evict("a")
		e.same("notice", e.evicted(site), []string{"a"})
		e.same("only to its site", e.evicted("other-site"), []string{})
		e.collect("other-site", "a")
		e.same("another site cannot collect it", e.evicted(site), []string{"a"})
		e.collect(site, "a")
		e.same("collected", e.evicted(site), []string{})
	}},

	{"a notice is not listed once the job is published again, nor past its deadline", func(e *env) {
		s := stub("a", "alice")
		s.DeadlineAt = e.nowMs() + 120_000
		e.enqueue(site, s)
		e.evict("a")
		e.same("notice", e.evicted(site), []string{"a"})
		e.enqueue(site, s)
		e.same("published again", e.evicted(site), []string{})
		e.evict("a")
		e.same("evicted again", e.evicted(site), []string{"a"})
		e.advance(120_000)
		e.same("past the deadline", e.evicted(site), []string{})
	}},
}
