package storetest

import (
	"fmt"
	"slices"

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
		// A replayed fetch would set running on a done job, hiding its result
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

		finished, err := e.s.Finished(e.ctx, site, 0)
		e.check(err)
		e.same("finished", jobIDs(finished), []string{"a"})
		e.same("finished disposition", finished[0].Disposition, store.DispositionCanceled)
		// No acknowledgement exists: a pure read lists it on every poll.
		again, err := e.s.Finished(e.ctx, site, 0)
		e.check(err)
		e.same("finished again", jobIDs(again), []string{"a"})
		other, err := e.s.Finished(e.ctx, "site_other", 0)
		e.check(err)
		e.same("other site's finished", jobIDs(other), []string{})
	}},
	{"pages the GET's results: the fresh on every page, every result within a rotation", func(e *env) {
		in := claimArgs()
		in.LeaseMs = 120_000
		// Few enough pages to list them all within the fresh window once
		// the results are no longer recent.
		const n, limit = 14, 10
		rotated := store.ResultsRotated(limit)
		finish := func(id string, deadlineIn int64) {
			s := stub(id, "alice")
			s.DeadlineAt = e.nowMs() + deadlineIn
			e.enqueue(site, s)
			granted := e.claimOne(in, id)
			e.seal(id)
			e.take(id, "runner_1", granted.Lease.ID)
			e.complete(id, "runner_1", granted.Lease.ID, "answer", store.DispositionOK)
		}
		page := func() []string {
			got, err := e.s.ResultsPage(e.ctx, site, limit)
			e.check(err)
			ids := jobIDs(got)
			if len(ids) > limit {
				e.T.Fatalf("page of %d results, limit %d: %v", len(ids), limit, ids)
			}
			return ids
		}
		// Few results: the fresh and the rotation's share beside them are
		// every result, on every page.
		var few []string
		for i := range rotated + 1 {
			if i == rotated {
				e.advance(store.ResultsFreshMs) // the others are old
			}
			id := fmt.Sprintf("j%d", i)
			finish(id, 600_000)
			few = append(few, id)
		}
		for range 3 {
			got := page()
			slices.Sort(got)
			e.same("a page of few", got, few)
		}
		// Older than the window, they come only from the rotation.
		e.advance(store.ResultsFreshMs)
		var fresh []string
		for i := rotated + 1; i < n; i++ {
			id := fmt.Sprintf("j%d", i)
			finish(id, 600_000)
			fresh = append(fresh, id)
			e.advance(1) // accepted a millisecond apart: newest last
		}
		// Fresh but not recent: the page holds the newest of them only.
		e.advance(store.ResultsRecentMs)
		newest := fresh[len(fresh)-(limit-rotated):]
		slices.Reverse(newest)
		seen := map[string]bool{}
		// The rotation moves rotated a page, pages store.ResultsRotateMs
		// apart: what the fresh part leaves out in that many pages, and
		// starting anywhere takes at most one page more.
		for range (n-len(newest))/rotated + 1 {
			ids := page()
			e.same("the page's fresh part, newest first", ids[:len(newest)], newest)
			for _, id := range ids {
				seen[id] = true
			}
			e.advance(store.ResultsRotateMs)
		}
		e.same("listed over the pages", len(seen), n)
		// Past the window, nothing is fresh: a page is the rotation's share.
		e.advance(store.ResultsFreshMs)
		if ids := page(); len(ids) > rotated {
			e.T.Fatalf("with nothing fresh a page of %d results %v, the rotation's share is %d", len(ids), ids, rotated)
		}
		other, err := e.s.ResultsPage(e.ctx, "site_other", limit)
		e.check(err)
		e.same("other site's page", jobIDs(other), []string{})
	}},
	{"lists every result of the last ResultsRecentMs on the GET's page", func(e *env) {
		in := claimArgs()
		in.LeaseMs = 120_000
		const n, limit = 12, 5
		rotated := store.ResultsRotated(limit)
		var all []string
		for i := range n {
			id := fmt.Sprintf("r%02d", i)
			s := stub(id, "alice")
			s.DeadlineAt = e.nowMs() + 600_000
			e.enqueue(site, s)
			granted := e.claimOne(in, id)
			e.seal(id)
			e.take(id, "runner_1", granted.Lease.ID)
			e.complete(id, "runner_1", granted.Lease.ID, "answer", store.DispositionOK)
			all = append(all, id)
			e.advance(1)
		}
		// All accepted within the last ResultsRecentMs: a site taking more
		// between two polls than a page's fixed part sees every one.
		got, err := e.s.ResultsPage(e.ctx, site, limit)
		e.check(err)
		ids := jobIDs(got)
		newestFirst := slices.Clone(all)
		slices.Reverse(newestFirst)
		e.same("a page of the recent, newest first", ids, newestFirst)
		// Past it, a page is back to its fixed bound.
		e.advance(store.ResultsRecentMs)
		got, err = e.s.ResultsPage(e.ctx, site, limit)
		e.check(err)
		ids = jobIDs(got)
		if len(ids) > limit {
			e.T.Fatalf("a page of %d results once none is recent, bound %d: %v", len(ids), limit, ids)
		}
		e.same("its fresh part, newest first", ids[:limit-rotated], newestFirst[:limit-rotated])
	}},
	{"moves the results rotation at most once a ResultsRotateMs", func(e *env) {
		in := claimArgs()
		in.LeaseMs = 120_000
		const limit = 5 // a page's rotation share is one result
		ids := []string{"a", "b", "c"}
		for _, id := range ids {
			s := stub(id, "alice")
			s.DeadlineAt = e.nowMs() + 600_000
			e.enqueue(site, s)
			granted := e.claimOne(in, id)
			e.seal(id)
			e.take(id, "runner_1", granted.Lease.ID)
			e.complete(id, "runner_1", granted.Lease.ID, "answer", store.DispositionOK)
			e.advance(1) // accepted a millisecond apart, in enqueue order
		}
		// None is fresh: a page is the rotation's stretch alone.
		e.advance(store.ResultsFreshMs)
		const polls = 10
		step := int64(store.ResultsRotateMs / polls)
		// A bound's first page lists the stretch where the rotation stands
		// and moves it on; the rest of the bound's pages list the next
		// stretch and leave it, so the next bound's first page lists that
		// one again. Past the end it starts over, within the same rule.
		// The order it goes through the results is the store's (the
		// DynamoDB store's goes shard by shard), so over len(ids) bounds
		// the first pages list each result once.
		var moved []string // what the last bound's later pages listed
		firsts := map[string]int{}
		for bound := range 2 * len(ids) {
			var rest []string
			for poll := range polls {
				got, err := e.s.ResultsPage(e.ctx, site, limit)
				e.check(err)
				listed := jobIDs(got)
				if len(listed) != 1 {
					e.T.Fatalf("bound %d, page %d lists %v, want one result", bound, poll, listed)
				}
				switch {
				case poll == 0:
					if bound > 0 {
						e.same(fmt.Sprintf("bound %d's first page, the stretch the last bound moved to", bound), listed, moved)
					}
					firsts[listed[0]]++
				case poll == 1:
					rest = listed
				default:
					e.same(fmt.Sprintf("bound %d, page %d", bound, poll), listed, rest)
				}
				e.advance(step)
			}
			moved = rest
		}
		e.same("first pages per result", firsts, map[string]int{"a": 2, "b": 2, "c": 2})
	}},
	{"refuses a result once the deadline has passed, swept or not", func(e *env) {
		// Accepted now, it would be listed to no results poll: accepted at
		// the relay, and never delivered.
		in := claimArgs()
		in.LeaseMs = 120_000
		s := stub("a", "alice")
		s.DeadlineAt = e.nowMs() + 60_000
		e.enqueue(site, s)
		granted := e.claimOne(in, "a")
		e.seal("a")
		e.take("a", "runner_1", granted.Lease.ID)
		e.advance(60_000)
		e.same("at the deadline", e.complete("a", "runner_1", granted.Lease.ID, "late", store.DispositionOK),
			store.CompleteResult{Refused: store.RefusedNotFound})
		for _, grace := range []int64{0, store.ResultGraceMs} {
			finished, err := e.s.Finished(e.ctx, site, grace)
			e.check(err)
			e.same("finished", jobIDs(finished), []string{})
		}
	}},

	{"lists a result to a collect for the grace after its deadline, and to the GET until the deadline", func(e *env) {
		// A result accepted in the deadline's last instant, after the
		// site's last poll, still reaches the site's next one.
		in := claimArgs()
		in.LeaseMs = 120_000
		deadline := e.nowMs() + 60_000
		for _, id := range []string{"a", "b", "c"} {
			s := stub(id, "alice")
			s.DeadlineAt = deadline
			e.enqueue(site, s)
			granted := e.claimOne(in, id)
			e.seal(id)
			e.take(id, "runner_1", granted.Lease.ID)
		}
		e.advance(59_999)
		for _, id := range []string{"a", "b", "c"} {
			j := e.mustJob(site, id)
			e.same("accepted a millisecond early", e.complete(id, "runner_1", j.ClaimedBy.LeaseID, "answer", store.DispositionOK),
				store.CompleteResult{Accepted: true, State: store.StateDone})
		}
		e.advance(1)
		e.same("removed", jobIDs(e.sweep().Removed), []string{})
		e.wantAbsent(site, "a")
		finished, err := e.s.Finished(e.ctx, site, 0)
		e.check(err)
		e.same("the GET's", jobIDs(finished), []string{})
		finished, err = e.s.Finished(e.ctx, site, store.ResultGraceMs)
		e.check(err)
		e.same("a collect's", jobIDs(finished), []string{"a", "b", "c"})
		want := resultEnvelope("answer")
		e.same("result", finished[0].Result, &want)

		// Collected, it is not listed again; published anew, the new job
		// hides the old result.
		e.check(e.s.Collect(e.ctx, site, []string{"a"}))
		again := stub("b", "alice")
		again.DeadlineAt = e.nowMs() + 600_000
		e.enqueue(site, again)
		finished, err = e.s.Finished(e.ctx, site, store.ResultGraceMs)
		e.check(err)
		e.same("after a collect and a new b", jobIDs(finished), []string{"c"})

		e.advance(store.ResultGraceMs - 1)
		e.sweep()
		finished, err = e.s.Finished(e.ctx, site, store.ResultGraceMs)
		e.check(err)
		e.same("at the grace's last millisecond", jobIDs(finished), []string{"c"})
		e.advance(1)
		e.sweep()
		finished, err = e.s.Finished(e.ctx, site, store.ResultGraceMs)
		e.check(err)
		e.same("after the grace", jobIDs(finished), []string{})
	}},
}
