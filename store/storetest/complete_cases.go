package storetest

import (
	"github.com/byorelay/byorelay/store"
)

var completeCases = []testCase{
	{"records a result once", func(e *env) {
		// Accepted from awaiting-payload: completing does not require the
		// payload was fetched, only that the grant is current.
		e.enqueue(site, stub("a", "alice"))
		granted := e.claimOne(claimArgs(), "a")
		first := e.complete("a", "runner_1", granted.Lease.ID, "answer", store.DispositionOK)
		e.same("first", first, store.CompleteResult{Accepted: true, State: store.StateDone})
		replay := e.complete("a", "runner_1", granted.Lease.ID, "different", store.DispositionError)
		e.same("replay", replay, store.CompleteResult{Accepted: false, Duplicate: true, State: store.StateDone})

		job := e.mustJob(site, "a")
		e.same("disposition", job.Disposition, store.DispositionOK)
		want := resultEnvelope("answer")
		e.same("result", job.Result, &want)
		if job.ClaimedBy == nil || job.ClaimedBy.LeaseID != granted.Lease.ID {
			e.Fatalf("the grant the result was recorded under is gone: %+v", job.ClaimedBy)
		}
	}},

	{"answers only the device that finished it with duplicate", func(e *env) {
		// A device whose acknowledgement was lost hears its answer is
		// recorded; anyone else gets the refusal they would get for a job
		// that is not terminal, so a job id is not a terminality probe.
		e.enqueue(site, stub("a", "alice"))
		granted := e.claimOne(claimArgs(), "a")
		e.complete("a", "runner_1", granted.Lease.ID, "answer", store.DispositionOK)

		e.same("a stranger with the lease", e.complete("a", "runner_2", granted.Lease.ID, "x", store.DispositionOK), store.CompleteResult{Refused: store.RefusedNotHolder})
		e.same("the finisher under another lease", e.complete("a", "runner_1", "some-other-lease", "x", store.DispositionOK), store.CompleteResult{Refused: store.RefusedStaleLease})
		e.same("disposition", e.mustJob(site, "a").Disposition, store.DispositionOK)
	}},

	{"refuses a result produced under a grant that ended", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		e.claimOne(claimArgs(), "a")
		late := e.complete("a", "runner_1", "a-grant-that-ended", "late", store.DispositionOK)
		e.same("late", late, store.CompleteResult{Refused: store.RefusedStaleLease})
		job := e.mustJob(site, "a")
		e.same("state", job.State, store.StateAwaitingPayload)
		if job.Result != nil || job.Disposition != "" {
			e.Fatalf("a refused result was stored: %+v", job)
		}
	}},

	{"refuses a result for a job nobody gave this runner", func(e *env) {
		e.same("absent", e.complete("nope", "runner_1", "nope", "x", store.DispositionOK), store.CompleteResult{Refused: store.RefusedNotFound})
	}},

	{"refuses a payload for a job that already finished", func(e *env) {
		// V1-6: a replayed fetch set running on a done job, hiding its result
		// and letting the sweep requeue finished work.
		e.enqueue(site, stub("a", "alice"))
		granted := e.claimOne(claimArgs(), "a")
		e.seal("a")
		e.take("a", "runner_1", granted.Lease.ID)
		e.complete("a", "runner_1", granted.Lease.ID, "answer", store.DispositionOK)
		e.same("replayed fetch", e.take("a", "runner_1", granted.Lease.ID), store.PayloadResult{Refused: store.RefusedTerminal})
		e.wantState(site, "a", store.StateDone)
	}},

	{"lists a site's finished results until the deadline, and nobody else's", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		e.enqueue(site, stub("b", "alice"))
		e.enqueue("site_other", stub("a", "alice"))
		in := claimArgs()
		in.Routes = append(in.Routes, store.Route{SiteID: "site_other", Owner: "alice"})
		granted := e.claim(in)
		e.same("granted", len(granted), 3)
		e.complete(granted[0].ID, "runner_1", granted[0].Lease.ID, "answer", store.DispositionCanceled)

		finished, err := e.s.Finished(e.ctx, site)
		e.check(err)
		e.same("finished", jobIDs(finished), []string{"a"})
		e.same("finished disposition", finished[0].Disposition, store.DispositionCanceled)
		// No acknowledgement exists: a pure read lists it on every poll.
		again, err := e.s.Finished(e.ctx, site)
		e.check(err)
		e.same("finished again", jobIDs(again), []string{"a"})
		other, err := e.s.Finished(e.ctx, "site_other")
		e.check(err)
		e.same("other site's finished", jobIDs(other), []string{})
	}},
}
