package storetest

import (
	"github.com/byorelay/byorelay/store"
)

var sweepCases = []testCase{
	{"reports what it removed, not only what it requeued", func(e *env) {
		// A caller that logs requeues and never mentions removals
		// reports a shrinking queue with no reason for it.
		expired := stub("expired", "alice")
		expired.DeadlineAt = e.nowMs() - 1_000
		e.enqueue(site, expired)
		e.enqueue(site, stub("alive", "alice"))

		swept := e.sweep()
		e.same("removed", jobIDs(swept.Removed), []string{"expired"})
		e.same("requeued", jobIDs(swept.Requeued), []string{})
		e.wantAbsent(site, "expired")
		e.wantState(site, "alive", store.StateQueued)
	}},

	{"drops a job at its deadline in any state, ciphertext and all, and reports every one but the finished", func(e *env) {
		deadline := e.nowMs() + 60_000
		// Enqueued in the order they are claimed; "queued" never is.
		for _, id := range []string{"awaiting", "ready", "running", "done", "queued"} {
			s := stub(id, "alice")
			s.DeadlineAt = deadline
			e.enqueue(site, s)
		}
		in := claimArgs()
		in.LeaseMs = 120_000
		in.Max = 1
		for _, step := range []struct {
			id  string
			end store.State
		}{{"awaiting", store.StateAwaitingPayload}, {"ready", store.StateReady}, {"running", store.StateRunning}, {"done", store.StateDone}} {
			granted := e.claimOne(in, step.id)
			if step.end != store.StateAwaitingPayload {
				e.seal(step.id)
			}
			if step.end == store.StateRunning || step.end == store.StateDone {
				e.take(step.id, "runner_1", granted.Lease.ID)
			}
			if step.end == store.StateDone {
				e.complete(step.id, "runner_1", granted.Lease.ID, "answer", store.DispositionOK)
			}
			e.wantState(site, step.id, step.end)
		}
		e.advance(59_999)
		e.same("a millisecond early", len(e.sweep().Removed), 0)
		e.advance(1)
		swept := e.sweep()
		e.same("removed", jobIDs(swept.Removed), []string{"awaiting", "ready", "running", "queued"})
		for _, id := range []string{"queued", "awaiting", "ready", "running", "done"} {
			e.wantAbsent(site, id)
		}
		finished, err := e.s.Finished(e.ctx, site, 0)
		e.check(err)
		e.same("finished", jobIDs(finished), []string{})
	}},

	{"requeues an unsealed grant when the site's window runs out, sticky to its device", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		e.claimOne(claimArgs(), "a")
		e.advance(store.AwaitingPayloadMs - 1)
		swept := e.sweep()
		e.same("a millisecond early", len(swept.Requeued)+len(swept.Removed), 0)
		e.advance(1)
		swept = e.sweep()
		e.same("requeued", jobIDs(swept.Requeued), []string{"a"})
		got := swept.Requeued[0]
		e.same("reported state", got.State, store.StateQueued)
		job := e.mustJob(site, "a")
		e.same("state", job.State, store.StateQueued)
		e.same("re-offer", job.ReofferTo, "runner_1")
		e.same("attempts", job.SealAttempts, 1)
		if job.ClaimedBy != nil || job.AwaitingUntil != 0 {
			e.Fatalf("the lapsed claim survived: %+v", job)
		}
	}},

	{"evicts a job on its third unsealed expiry", func(e *env) {
		// After three it is no longer patience, it is a queue handing
		// the same dead job around.
		e.enqueue(site, stub("a", "alice"))
		for attempt := 1; attempt <= 2; attempt++ {
			e.claimOne(claimArgs(), "a")
			e.advance(store.AwaitingPayloadMs)
			swept := e.sweep()
			e.same("requeued", jobIDs(swept.Requeued), []string{"a"})
			e.same("attempts", e.mustJob(site, "a").SealAttempts, attempt)
		}
		e.claimOne(claimArgs(), "a")
		e.advance(store.AwaitingPayloadMs)
		swept := e.sweep()
		e.same("requeued", jobIDs(swept.Requeued), []string{})
		e.same("removed", jobIDs(swept.Removed), []string{"a"})
		e.wantAbsent(site, "a")
	}},

	{"keeps the first abandoner as the re-offer target", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		e.claimOne(claimArgs(), "a")
		e.advance(store.AwaitingPayloadMs)
		e.sweep()
		e.claimOne(claimArgs(), "a")
		e.advance(store.AwaitingPayloadMs)
		e.sweep()
		e.same("re-offer", e.mustJob(site, "a").ReofferTo, "runner_1")
	}},

	{"requeues a sealed job whose lease ran out, without counting an attempt", func(e *env) {
		for _, running := range []bool{false, true} {
			e.rebuild(storeOptions(e))
			e.enqueue(site, stub("a", "alice"))
			in := claimArgs()
			in.LeaseMs = 20_000
			granted := e.claimOne(in, "a")
			e.seal("a")
			if running {
				e.take("a", "runner_1", granted.Lease.ID)
			}
			e.advance(19_999)
			e.same("a millisecond early", len(e.sweep().Requeued), 0)
			e.advance(1)
			swept := e.sweep()
			e.same("requeued", jobIDs(swept.Requeued), []string{"a"})
			job := e.mustJob(site, "a")
			e.same("state", job.State, store.StateQueued)
			if job.ClaimedBy != nil || job.Payload != nil || job.ReofferTo != "" || job.SealAttempts != 0 {
				e.Fatalf("a lease lapse left %+v", job)
			}
			e.claimOne(asRunner("runner_2"), "a")
		}
	}},

	{"leaves an unsealed grant to the site's window, whatever its lease", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		in := claimArgs()
		in.LeaseMs = 1_000
		e.claimOne(in, "a")
		e.advance(5_000)
		swept := e.sweep()
		e.same("swept", len(swept.Requeued)+len(swept.Removed), 0)
		e.wantState(site, "a", store.StateAwaitingPayload)
	}},

	{"never requeues a finished job for its lease", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		in := claimArgs()
		in.LeaseMs = 1_000
		granted := e.claimOne(in, "a")
		e.complete("a", "runner_1", granted.Lease.ID, "answer", store.DispositionOK)
		e.advance(5_000)
		e.same("swept", len(e.sweep().Requeued), 0)
		e.wantState(site, "a", store.StateDone)
	}},

	{"counts only consecutive unsealed expiries toward eviction", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		in := claimArgs()
		in.LeaseMs = 20_000
		for range 2 {
			e.claimOne(in, "a")
			e.advance(store.AwaitingPayloadMs)
			e.sweep()
		}
		e.claimOne(in, "a")
		e.seal("a") // resets the count
		e.advance(20_000)
		e.sweep() // lease lapse: requeued, not counted
		e.claimOne(in, "a")
		e.advance(store.AwaitingPayloadMs)
		swept := e.sweep()
		e.same("requeued, not evicted", jobIDs(swept.Requeued), []string{"a"})
		e.same("attempts", e.mustJob(site, "a").SealAttempts, 1)
	}},

	{"a configured awaiting window is stamped at claim and enforced by the sweep", func(e *env) {
		opts := storeOptions(e)
		opts.AwaitingPayloadMs = 2_000
		e.rebuild(opts)
		e.enqueue(site, stub("a", "alice"))
		claimedAt := e.nowMs()
		granted := e.claimOne(claimArgs(), "a")
		e.same("awaitingUntil", e.mustJob(site, "a").AwaitingUntil, claimedAt+2_000)
		e.same("the claim's awaitingUntil", granted.AwaitingUntil, claimedAt+2_000)
		e.advance(1_999)
		e.same("a millisecond early", len(e.sweep().Requeued), 0)
		e.advance(1)
		e.same("requeued", jobIDs(e.sweep().Requeued), []string{"a"})
	}},
}

// storeOptions are the options a case's store is normally built with.
func storeOptions(e *env) store.Options {
	return store.Options{Clock: e.clock, OnChurn: e.churn.add}
}
