package storetest

import (
	"fmt"
	"slices"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// inlineSweepCases pin the bound on the sweep a request runs (SweepInline,
// and the one Claim runs first): at most Options.InlineSweepLimit due jobs,
// earliest due first, while Sweep stays complete and no read waits for
// either to have reached an item.
var inlineSweepCases = []testCase{
	{"moves at most its bound, earliest due first, and repeated calls drain the backlog", func(e *env) {
		e.rebuild(withInlineLimit(e, 3))
		// Enqueued latest deadline first, so "earliest due" and "enqueue
		// order" pick different jobs.
		backlog := dueBacklog(e, 7)
		alive := e.enqueue(site, stub("alive", "alice"))
		e.advance(10_000)

		// Reported in enqueue order, as a full sweep reports them.
		e.same("first call", jobIDs(e.sweepInline().Removed), []string{backlog[4], backlog[5], backlog[6]})
		e.same("left", e.jobIDs(), []string{backlog[0], backlog[1], backlog[2], backlog[3], alive.ID})
		e.same("second call", jobIDs(e.sweepInline().Removed), []string{backlog[1], backlog[2], backlog[3]})
		e.same("third call", jobIDs(e.sweepInline().Removed), []string{backlog[0]})
		swept := e.sweepInline()
		e.same("nothing left to do", len(swept.Removed)+len(swept.Requeued), 0)
		e.same("left", e.jobIDs(), []string{alive.ID})
	}},

	{"defaults to DefaultInlineSweepLimit", func(e *env) {
		backlog := dueBacklog(e, store.DefaultInlineSweepLimit+1)
		e.advance(int64(len(backlog)+1) * 1_000)
		e.same("moved", len(e.sweepInline().Removed), store.DefaultInlineSweepLimit)
		// The latest deadline is the one left.
		e.same("left", e.jobIDs(), []string{backlog[0]})
	}},

	{"leaves Sweep complete however large the backlog", func(e *env) {
		e.rebuild(withInlineLimit(e, 2))
		backlog := dueBacklog(e, 5)
		e.advance(10_000)
		e.same("removed", len(e.sweep().Removed), len(backlog))
		e.same("left", e.jobIDs(), []string{})
	}},

	{"claims sweep at most the bound and never grant a job past its deadline", func(e *env) {
		e.rebuild(withInlineLimit(e, 2))
		// Ahead of "fresh" in enqueue order and claimable in every other
		// respect, so only the deadline keeps them from being granted; more
		// of them than a claim reads candidates, so none may starve it.
		backlog := dueBacklog(e, 12)
		e.enqueue(site, stub("fresh", "alice"))
		e.advance(20_000)

		e.same("granted", ids(e.claim(claimArgs())), []string{"fresh"})
		e.same("the claim swept the two earliest due", e.jobIDs(), append(slices.Clone(backlog[:10]), "fresh"))
		for _, id := range backlog[:10] {
			e.wantState(site, id, store.StateQueued)
		}
		for left := 10; left > 0; left -= 2 {
			e.same("granted from the backlog", len(e.claim(asRunner("runner_2"))), 0)
			e.same("the next claim swept two more", e.jobIDs(), append(slices.Clone(backlog[:left-2]), "fresh"))
		}
	}},

	{"ends an unsealed grant whose window ran out without a sweep", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		granted := e.claimOne(claimArgs(), "a")
		e.advance(store.AwaitingPayloadMs)
		// Nothing has swept: the job still reads awaiting-payload...
		e.wantState(site, "a", store.StateAwaitingPayload)
		// ...but no site is asked to seal for it and the holder loses it.
		awaiting, err := e.s.Awaiting(e.ctx, site)
		e.check(err)
		e.same("awaiting", jobIDs(awaiting), []string{})
		e.same("lost", e.renew("runner_1", granted).Lost, []protocol.GrantRef{grant(granted)})
		e.same("the sweep still fires it", jobIDs(e.sweep().Requeued), []string{"a"})
	}},

	{"ends a lapsed lease without a sweep", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		in := claimArgs()
		in.LeaseMs = 20_000
		granted := e.claimOne(in, "a")
		e.seal("a")
		e.advance(20_000)
		e.wantState(site, "a", store.StateReady)
		res := e.renew("runner_1", granted)
		e.same("renewed", len(res.Renewed), 0)
		e.same("lost", res.Lost, []protocol.GrantRef{grant(granted)})
		e.same("the sweep still fires it", jobIDs(e.sweep().Requeued), []string{"a"})
	}},

	{"ends a grant past its deadline without a sweep", func(e *env) {
		s := stub("a", "alice")
		s.DeadlineAt = e.nowMs() + 30_000
		e.enqueue(site, s)
		in := claimArgs()
		in.LeaseMs = 120_000
		granted := e.claimOne(in, "a")
		e.seal("a")
		e.advance(30_000)
		e.same("lost", e.renew("runner_1", granted).Lost, []protocol.GrantRef{grant(granted)})
		e.same("the sweep still removes it", jobIDs(e.sweep().Removed), []string{"a"})
	}},
}

// withInlineLimit is the case's usual options with the in-line bound set.
func withInlineLimit(e *env, limit int) store.Options {
	opts := storeOptions(e)
	opts.InlineSweepLimit = limit
	return opts
}

// dueBacklog enqueues n claimable jobs whose deadlines are 1 s apart, the
// latest first: backlog[i] falls due at now + (n-i) s. Advance past n s and
// they are all due, earliest last in enqueue order.
func dueBacklog(e *env, n int) []string {
	e.Helper()
	now := e.nowMs()
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("due-%02d", i)
		s := stub(ids[i], "alice")
		s.DeadlineAt = now + int64(n-i)*1_000
		e.enqueue(site, s)
	}
	return ids
}

func (e *env) sweepInline() store.SweepResult {
	e.Helper()
	res, err := e.s.SweepInline(e.ctx)
	e.check(err)
	return res
}

// jobIDs is every stored job's id, in enqueue order.
func (e *env) jobIDs() []string {
	e.Helper()
	jobs, err := e.s.Jobs(e.ctx)
	e.check(err)
	return jobIDs(jobs)
}

func (e *env) renew(runnerID string, granted store.Claimed) store.RenewResult {
	e.Helper()
	res, err := e.s.RenewLeases(e.ctx, store.RenewInput{RunnerID: runnerID, Leases: []protocol.GrantRef{grant(granted)}, LeaseMs: 60_000})
	e.check(err)
	return res
}
