package storetest

import (
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

var releaseCases = []testCase{
	{"requeues a released grant and forgets the claim", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		granted := e.claimOne(claimArgs(), "a")
		e.seal("a")
		e.same("released", e.release("runner_1", "", 0, grant(granted)), []string{"a"})
		job := e.mustJob(site, "a")
		e.same("state", job.State, store.StateQueued)
		if job.ClaimedBy != nil || job.AwaitingUntil != 0 || job.Payload != nil {
			e.Fatalf("the claim survived the release: %+v", job)
		}
	}},

	{"releases nothing for a stale lease or another runner's grant", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		granted := e.claimOne(claimArgs(), "a")
		before := e.mustJob(site, "a")
		stale := grant(granted)
		stale.LeaseID = "a-grant-that-ended"
		e.same("stale lease", len(e.release("runner_1", store.ReleaseShutdown, 0, stale)), 0)
		e.same("another runner", len(e.release("runner_2", store.ReleaseRefused, 0, grant(granted))), 0)
		e.same("unknown job", len(e.release("runner_1", store.ReleaseShutdown, 0, protocol.GrantRef{JobID: "nope", LeaseID: granted.Lease.ID})), 0)
		e.sameJob("the job", e.mustJob(site, "a"), before)
	}},

	{"does not offer a job back to the runner that refused it", func(e *env) {
		// REFUSAL_NOT_REOFFERED: without a record the two spin between
		// claim and release forever.
		e.enqueue(site, stub("a", "alice"))
		granted := e.claimOne(claimArgs(), "a")
		e.same("released", e.release("runner_1", store.ReleaseRefused, 0, grant(granted)), []string{"a"})

		e.same("the refuser", ids(e.claim(claimArgs())), []string{})
		e.wantState(site, "a", store.StateQueued)
		e.same("refused by", e.mustJob(site, "a").RefusedBy, []string{"runner_1"})
		e.claimOne(asRunner("runner_2"), "a")
	}},

	{"remembers a refusal for ever", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		first := e.claimOne(claimArgs(), "a")
		e.release("runner_1", store.ReleaseRefused, 0, grant(first))
		second := e.claimOne(asRunner("runner_2"), "a")
		e.release("runner_2", store.ReleaseShutdown, 0, grant(second))
		e.advance(24 * 60 * 60_000)
		e.same("the refuser, a day later", ids(e.claim(claimArgs())), []string{})
		e.same("refused by", e.mustJob(site, "a").RefusedBy, []string{"runner_1"})
		e.claimOne(asRunner("runner_2"), "a")
	}},

	{"keeps a job claimable by a runner that only went away", func(e *env) {
		for _, reason := range []store.ReleaseReason{"", store.ReleaseShutdown, store.ReleasePause, store.ReleaseRevoked, store.ReleaseBackendDown} {
			id := "job-" + string(reason)
			e.enqueue(site, stub(id, "alice"))
			granted := e.claimOne(claimArgs(), id)
			e.same("released for "+string(reason), e.release("runner_1", reason, 0, grant(granted)), []string{id})
			e.claimOne(claimArgs(), id)
			e.seal(id) // frees the pair's slot for the next reason
		}
	}},

	{"does not offer a job back to a runner before its not-before", func(e *env) {
		// Neither "not ever" nor "immediately": a control plane declining
		// for something the world can change needs a rate, or the device
		// re-claims at once and is declined again.
		e.enqueue(site, stub("a", "alice"))
		granted := e.claimOne(claimArgs(), "a")
		e.release("runner_1", "", e.nowMs()+600_000, grant(granted))

		e.same("the same runner", ids(e.claim(claimArgs())), []string{})
		e.wantState(site, "a", store.StateQueued)
		e.claimOne(asRunner("runner_2"), "a")
	}},

	{"offers it again once the not-before has passed", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		granted := e.claimOne(claimArgs(), "a")
		e.release("runner_1", "", e.nowMs()-1_000, grant(granted))
		e.claimOne(claimArgs(), "a")
	}},

	{"offers it again when the clock reaches the not-before", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		granted := e.claimOne(claimArgs(), "a")
		notBefore := e.nowMs() + store.RetryAfterMs
		e.release("runner_1", store.ReleaseShutdown, notBefore, grant(granted))
		e.same("retry after", e.mustJob(site, "a").RetryAfter, map[string]int64{"runner_1": notBefore})
		e.advance(store.RetryAfterMs - 1)
		e.same("a millisecond early", ids(e.claim(claimArgs())), []string{})
		e.advance(1)
		e.claimOne(claimArgs(), "a")
	}},

	{"will not un-finish a job that is already done", func(e *env) {
		// The third holder-scoped door: a release on a done job flipped it
		// back to queued, the result became unreachable and somebody ran it
		// a second time. The daemon's shutdown races exactly this.
		e.enqueue(site, stub("a", "alice"))
		granted := e.claimOne(claimArgs(), "a")
		e.seal("a")
		e.take("a", "runner_1", granted.Lease.ID)
		e.same("complete", e.complete("a", "runner_1", granted.Lease.ID, "answer", store.DispositionOK), store.CompleteResult{Accepted: true, State: store.StateDone})

		e.same("released", len(e.release("runner_1", store.ReleaseShutdown, 0, grant(granted))), 0)
		e.wantState(site, "a", store.StateDone)
		finished, err := e.s.Finished(e.ctx, site, 0)
		e.check(err)
		e.same("finished", jobIDs(finished), []string{"a"})
		e.same("offered to nobody", ids(e.claim(asRunner("runner_2"))), []string{})
	}},
}
