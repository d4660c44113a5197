package storetest

import (
	"github.com/byorelay/byorelay/store"
)

var enqueueCases = []testCase{
	{"starts a new job queued, with nothing claimed or refused", func(e *env) {
		got := e.enqueue(site, stub("a", "alice"))
		e.sameJob("enqueued job", got, store.Job{
			ID: "a", SiteID: site, Stub: stub("a", "alice"), State: store.StateQueued,
		})
		e.sameJob("stored job", e.mustJob(site, "a"), got)
	}},

	{"is idempotent by job id, and a replay does not disturb work in flight", func(e *env) {
		// A replayed enqueue inside the freshness window
		// must not yank a job back from the machine running it.
		e.enqueue(site, stub("a", "alice"))
		e.claim(claimArgs())
		held := e.mustJob(site, "a")

		replay := stub("a", "bob")
		replay.Kind = "llm.chat"
		got := e.enqueue(site, replay)

		e.wantState(site, "a", store.StateAwaitingPayload)
		e.sameJob("the replay's answer is the job already routing", got, held)
		e.sameJob("and the stored job is unchanged", e.mustJob(site, "a"), held)
	}},

	{"gives two sites the same id without either seeing the other", func(e *env) {
		// Keyed by bare id, the second site's enqueue returned the first
		// site's job, and refusing the collision was a cross-tenant
		// existence oracle. Keyed by (site, id) there is nothing to answer.
		e.enqueue(site, stub("shared", "alice"))
		e.enqueue("site_other", stub("shared", "bob"))

		if got := e.mustJob(site, "shared").Stub.Owner; got != "alice" {
			e.Fatalf("site's job owner = %q, want alice", got)
		}
		if got := e.mustJob("site_other", "shared").Stub.Owner; got != "bob" {
			e.Fatalf("other site's job owner = %q, want bob", got)
		}

		granted := e.claim(claimArgs())
		e.same("a claim for one site sees only that site's job", ids(granted), []string{"shared"})
		if granted[0].Owner != "alice" {
			e.Fatalf("granted owner = %q, want alice", granted[0].Owner)
		}
		e.wantState("site_other", "shared", store.StateQueued)

		replay := e.enqueue(site, stub("shared", "alice"))
		e.sameJob("the same site republishing is absorbed", replay, e.mustJob(site, "shared"))
	}},

	{"does not find a job under another site's id", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		e.wantAbsent("site_other", "a")
		e.wantAbsent(site, "never-enqueued")
	}},

	{"lists every site's jobs in enqueue order", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		e.enqueue("site_other", stub("b", "bob"))
		e.enqueue(site, stub("c", "alice"))
		jobs, err := e.s.Jobs(e.ctx)
		e.check(err)
		e.same("jobs", jobIDs(jobs), []string{"a", "b", "c"})
	}},

	{"lists only a site's own jobs awaiting a payload", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		e.enqueue(site, stub("b", "alice"))
		e.enqueue(site, stub("c", "alice"))
		e.enqueue("site_other", stub("x", "alice"))
		in := claimArgs()
		in.Routes = append(in.Routes, store.Route{SiteID: "site_other", Owner: "alice"})
		in.Max = 2
		e.claim(in) // a and b
		e.same("sealed b", e.seal("b"), store.SealResult{State: store.StateReady})
		e.claim(in) // c and x

		awaiting, err := e.s.Awaiting(e.ctx, site)
		e.check(err)
		e.same("awaiting", jobIDs(awaiting), []string{"a", "c"})
		other, err := e.s.Awaiting(e.ctx, "site_other")
		e.check(err)
		e.same("other site's awaiting", jobIDs(other), []string{"x"})
	}},

	{"hands out copies, so a caller cannot edit what is stored", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		e.claimOne(claimArgs(), "a")
		before := e.mustJob(site, "a")
		edited := e.mustJob(site, "a")
		edited.State = store.StateDone
		edited.ClaimedBy.RunnerID = "mallory"
		edited.RefusedBy = append(edited.RefusedBy, "mallory")
		edited.Stub.Owner = "mallory"
		e.sameJob("stored job", e.mustJob(site, "a"), before)
	}},
}
