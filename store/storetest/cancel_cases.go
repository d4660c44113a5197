package storetest

import (
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

var cancelCases = []testCase{
	{"names a cancelled job to the device holding it, by grant", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		e.enqueue(site, stub("b", "alice"))
		both := e.claim(claimArgs())
		e.same("granted", ids(both), []string{"a", "b"})
		granted := both[0]
		ok, err := e.s.Cancel(e.ctx, site, "a")
		e.check(err)
		e.same("cancelled", ok, true)
		e.same("flag", e.mustJob(site, "a").Cancelled, true)
		e.wantState(site, "a", store.StateAwaitingPayload)

		reqs, err := e.s.CancelRequests(e.ctx, "runner_1")
		e.check(err)
		e.same("cancel requests name only the cancelled grant", reqs, []protocol.GrantRef{grant(granted)})
		others, err := e.s.CancelRequests(e.ctx, "runner_2")
		e.check(err)
		e.same("another runner's", len(others), 0)
	}},

	{"refuses a cancel from a site that does not own the job", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		ok, err := e.s.Cancel(e.ctx, "someone_else", "a")
		e.check(err)
		e.same("cancelled", ok, false)
		e.same("flag", e.mustJob(site, "a").Cancelled, false)
		ok, err = e.s.Cancel(e.ctx, site, "nope")
		e.check(err)
		e.same("absent job", ok, false)
	}},

	{"offers a cancelled job to nobody", func(e *env) {
		e.enqueue(site, stub("queued", "alice"))
		e.enqueue(site, stub("held", "alice"))
		granted := e.claim(claimArgs())
		e.same("granted", ids(granted), []string{"queued", "held"})
		e.release("runner_1", store.ReleaseShutdown, 0, grant(granted[0]))
		for _, id := range []string{"queued", "held"} {
			ok, err := e.s.Cancel(e.ctx, site, id)
			e.check(err)
			e.same("cancelled "+id, ok, true)
		}
		e.release("runner_1", store.ReleaseShutdown, 0, grant(granted[1]))
		e.same("the old holder", ids(e.claim(claimArgs())), []string{})
		e.same("another device", ids(e.claim(asRunner("runner_2"))), []string{})
		e.wantState(site, "queued", store.StateQueued)
	}},

	{"keeps naming a cancelled job its holder finished", func(e *env) {
		// Done jobs keep their holder, so they are reported until the
		// deadline removes them.
		e.enqueue(site, stub("a", "alice"))
		granted := e.claimOne(claimArgs(), "a")
		_, err := e.s.Cancel(e.ctx, site, "a")
		e.check(err)
		e.complete("a", "runner_1", granted.Lease.ID, "x", store.DispositionCanceled)
		reqs, err := e.s.CancelRequests(e.ctx, "runner_1")
		e.check(err)
		e.same("cancel requests", reqs, []protocol.GrantRef{grant(granted)})
	}},
}
