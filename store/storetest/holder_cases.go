package storetest

import (
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

var holderCases = []testCase{
	{"refuses a stale lease and honours the current one", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		granted := e.claimOne(claimArgs(), "a")
		e.seal("a")
		e.same("an older grant", e.take("a", "runner_1", "an-older-grant"), store.PayloadResult{Refused: store.RefusedStaleLease})
		e.same("the current grant", e.take("a", "runner_1", granted.Lease.ID), store.PayloadResult{Envelope: &envelope})
	}},

	{"tells a stale grant it is stale after the job was claimed again", func(e *env) {
		// LEASE_HONORED per instance: a runner survives a
		// claim-release-reclaim cycle and a grant does not. A slow daemon is
		// told its grant ended, not that the job does not exist.
		e.enqueue(site, stub("a", "alice"))
		old := e.claimOne(claimArgs(), "a")
		e.release("runner_1", store.ReleaseShutdown, 0, grant(old))
		current := e.claimOne(claimArgs(), "a")
		e.seal("a")
		e.same("fetch under the old grant", e.take("a", "runner_1", old.Lease.ID), store.PayloadResult{Refused: store.RefusedStaleLease})
		e.same("result under the old grant", e.complete("a", "runner_1", old.Lease.ID, "late", store.DispositionOK), store.CompleteResult{Refused: store.RefusedStaleLease})
		e.same("fetch under the current grant", e.take("a", "runner_1", current.Lease.ID), store.PayloadResult{Envelope: &envelope})
	}},

	{"does not know a grant whose job went back to the queue", func(e *env) {
		// Nobody holds it now, so there is no grant to be stale against.
		e.enqueue(site, stub("a", "alice"))
		old := e.claimOne(claimArgs(), "a")
		e.release("runner_1", store.ReleaseShutdown, 0, grant(old))
		e.same("fetch", e.take("a", "runner_1", old.Lease.ID), store.PayloadResult{Refused: store.RefusedNotFound})
	}},

	{"will not answer for one job with another job's lease", func(e *env) {
		// Holder-scoped calls resolve the job from the lease; a lease for a
		// different job must not reach that job's payload.
		e.enqueue(site, stub("mine", "alice"))
		e.enqueue(site, stub("other", "alice"))
		granted := e.claim(claimArgs())
		e.same("granted", ids(granted), []string{"mine", "other"})
		mine, other := granted[0], granted[1]
		e.seal("other")
		e.same("the right runner, a real lease, the wrong job", e.take("other", "runner_1", mine.Lease.ID), store.PayloadResult{Refused: store.RefusedStaleLease})
		e.same("the honest pairing", e.take("other", "runner_1", other.Lease.ID), store.PayloadResult{Envelope: &envelope})
	}},

	{"tells a runner nothing about another site's job id", func(e *env) {
		// An id belonging to another tenant must answer exactly like an
		// id belonging to nobody.
		e.enqueue("site_somebody_else", stub("secret", "alice"))
		e.enqueue(site, stub("mine", "alice"))
		mine := e.claimOne(claimArgs(), "mine")

		other := e.take("secret", "runner_1", mine.Lease.ID)
		absent := e.take("no-such-job-anywhere", "runner_1", mine.Lease.ID)
		e.same("another site's id vs a nonexistent one", other, absent)
		e.same("the answer", other, store.PayloadResult{Refused: store.RefusedNotFound})

		e.same("complete, another site's id", e.complete("secret", "runner_1", mine.Lease.ID, "x", store.DispositionOK), store.CompleteResult{Refused: store.RefusedNotFound})
		e.same("complete, no such id", e.complete("no-such-job-anywhere", "runner_1", mine.Lease.ID, "x", store.DispositionOK), store.CompleteResult{Refused: store.RefusedNotFound})
	}},

	{"tells a runner presenting somebody else's lease that it is not the holder", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		granted := e.claimOne(claimArgs(), "a")
		e.seal("a")
		e.same("fetch", e.take("a", "runner_2", granted.Lease.ID), store.PayloadResult{Refused: store.RefusedNotHolder})
		e.wantState(site, "a", store.StateReady)
	}},

	{"says not-ready until the site seals, then hands the payload over and marks it running", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		granted := e.claimOne(claimArgs(), "a")
		e.same("before the seal", e.take("a", "runner_1", granted.Lease.ID), store.PayloadResult{Refused: store.RefusedNotReady})
		e.wantState(site, "a", store.StateAwaitingPayload)
		e.seal("a")
		e.same("after the seal", e.take("a", "runner_1", granted.Lease.ID), store.PayloadResult{Envelope: &envelope})
		e.wantState(site, "a", store.StateRunning)
		e.same("a repeat while running", e.take("a", "runner_1", granted.Lease.ID), store.PayloadResult{Envelope: &envelope})
		e.wantState(site, "a", store.StateRunning)
	}},

	{"renews a grant it still holds, and moves the stored expiry with it", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		in := claimArgs()
		in.LeaseMs = 1_000
		granted := e.claimOne(in, "a")
		e.advance(500)
		now := e.nowMs()

		res, err := e.s.RenewLeases(e.ctx, store.RenewInput{RunnerID: "runner_1", Leases: []protocol.GrantRef{grant(granted)}, LeaseMs: 60_000})
		e.check(err)
		e.same("lost", len(res.Lost), 0)
		e.same("renewed", res.Renewed, []store.RenewedLease{{JobID: "a", ExpiresAt: now + 60_000}})
		// The stored grant moved, not just the number returned.
		job := e.mustJob(site, "a")
		e.same("stored expiry", job.ClaimedBy.LeaseExpiresAt, now+60_000)
		e.same("stored lease id", job.ClaimedBy.LeaseID, granted.Lease.ID)
	}},

	{"reports a lease the runner no longer holds as lost, and renews nothing", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		in := claimArgs()
		in.LeaseMs = 1_000
		granted := e.claimOne(in, "a")
		before := e.mustJob(site, "a").ClaimedBy

		res, err := e.s.RenewLeases(e.ctx, store.RenewInput{
			RunnerID: "runner_1",
			Leases:   []protocol.GrantRef{{JobID: "a", LeaseID: "a-grant-that-ended"}, {JobID: "gone", LeaseID: "never"}},
			LeaseMs:  60_000,
		})
		e.check(err)
		e.same("renewed", len(res.Renewed), 0)
		e.same("lost, exactly as named", res.Lost, []protocol.GrantRef{{JobID: "a", LeaseID: "a-grant-that-ended"}, {JobID: "gone", LeaseID: "never"}})
		e.same("the current grant is untouched", e.mustJob(site, "a").ClaimedBy, before)
		e.same("lease id", before.LeaseID, granted.Lease.ID)
	}},

	{"renews for the holder only, and answers each lease in one call", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		e.enqueue(site, stub("b", "alice"))
		granted := e.claim(claimArgs())
		e.same("granted", ids(granted), []string{"a", "b"})
		now := e.nowMs()

		stranger, err := e.s.RenewLeases(e.ctx, store.RenewInput{RunnerID: "runner_2", Leases: []protocol.GrantRef{grant(granted[0])}, LeaseMs: 5_000})
		e.check(err)
		e.same("another runner renews nothing", len(stranger.Renewed), 0)
		e.same("and loses the grant it named", stranger.Lost, []protocol.GrantRef{grant(granted[0])})

		e.release("runner_1", store.ReleaseShutdown, 0, grant(granted[1]))
		res, err := e.s.RenewLeases(e.ctx, store.RenewInput{RunnerID: "runner_1", Leases: []protocol.GrantRef{grant(granted[0]), grant(granted[1])}, LeaseMs: 5_000})
		e.check(err)
		e.same("renewed", res.Renewed, []store.RenewedLease{{JobID: "a", ExpiresAt: now + 5_000}})
		e.same("lost", res.Lost, []protocol.GrantRef{grant(granted[1])})
	}},

	{"does not extend the site's window when it renews a lease", func(e *env) {
		// The awaiting window bounds how long we wait for a site; a busy
		// device has no bearing on it.
		e.enqueue(site, stub("a", "alice"))
		granted := e.claimOne(claimArgs(), "a")
		awaiting := e.mustJob(site, "a").AwaitingUntil
		e.advance(5_000)
		_, err := e.s.RenewLeases(e.ctx, store.RenewInput{RunnerID: "runner_1", Leases: []protocol.GrantRef{grant(granted)}, LeaseMs: 60_000})
		e.check(err)
		e.same("awaiting until", e.mustJob(site, "a").AwaitingUntil, awaiting)
		e.advance(5_000)
		swept := e.sweep()
		e.same("requeued when the window ran out", jobIDs(swept.Requeued), []string{"a"})
	}},

	{"reports a job removed for its deadline as lost", func(e *env) {
		s := stub("a", "alice")
		s.DeadlineAt = e.nowMs() + 30_000
		e.enqueue(site, s)
		granted := e.claimOne(claimArgs(), "a")
		e.advance(30_000)
		e.sweep()
		res, err := e.s.RenewLeases(e.ctx, store.RenewInput{RunnerID: "runner_1", Leases: []protocol.GrantRef{grant(granted)}, LeaseMs: 60_000})
		e.check(err)
		e.same("lost", res.Lost, []protocol.GrantRef{grant(granted)})
	}},

	{"holds nothing for a caller naming no runner or no lease", func(e *env) {
		// No identifier is a wildcard: "" is nobody's runner id and nobody's
		// lease, so it matches no grant, however the call is shaped.
		e.enqueue(site, stub("a", "alice"))
		granted := e.claimOne(claimArgs(), "a")
		e.seal("a")
		ok, err := e.s.Cancel(e.ctx, site, "a")
		e.check(err)
		e.same("cancelled", ok, true)
		before := e.mustJob(site, "a")

		e.same("fetch, no runner", e.take("a", "", granted.Lease.ID), store.PayloadResult{Refused: store.RefusedNotHolder})
		e.same("fetch, no lease", e.take("a", "runner_1", ""), store.PayloadResult{Refused: store.RefusedStaleLease})
		e.same("fetch, neither", e.take("a", "", ""), store.PayloadResult{Refused: store.RefusedNotFound})
		e.same("result, no runner", e.complete("a", "", granted.Lease.ID, "x", store.DispositionOK), store.CompleteResult{Refused: store.RefusedNotHolder})
		e.same("result, no lease", e.complete("a", "runner_1", "", "x", store.DispositionOK), store.CompleteResult{Refused: store.RefusedStaleLease})
		e.same("result, neither", e.complete("a", "", "", "x", store.DispositionOK), store.CompleteResult{Refused: store.RefusedNotFound})
		e.same("release, no runner", e.release("", store.ReleaseRefused, 0, grant(granted)), []string{})
		e.same("release, no lease", e.release("runner_1", store.ReleaseRefused, 0, protocol.GrantRef{JobID: "a"}), []string{})
		renewed, err := e.s.RenewLeases(e.ctx, store.RenewInput{RunnerID: "", Leases: []protocol.GrantRef{grant(granted), {JobID: "a"}}, LeaseMs: 60_000})
		e.check(err)
		e.same("renew, no runner", renewed.Renewed, []store.RenewedLease{})
		renewed, err = e.s.RenewLeases(e.ctx, store.RenewInput{RunnerID: "runner_1", Leases: []protocol.GrantRef{{JobID: "a"}}, LeaseMs: 60_000})
		e.check(err)
		e.same("renew, no lease", renewed.Renewed, []store.RenewedLease{})
		reqs, err := e.s.CancelRequests(e.ctx, "")
		e.check(err)
		e.same("cancel requests, no runner", reqs, []protocol.GrantRef{})
		e.sameJob("the job", e.mustJob(site, "a"), before)
	}},
}
