package storetest

import (
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/store"
)

var clockCases = []testCase{
	{"tells the time by its injected clock", func(e *env) {
		e.same("now", e.nowMs(), clock.EpochMs(Start))
		e.advance(1_234)
		e.same("now, moved", e.nowMs(), clock.EpochMs(Start)+1_234)
	}},

	{"stamps deadlines from its own clock", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		e.advance(42)
		now := e.nowMs()
		in := claimArgs()
		in.LeaseMs = 45_000
		granted := e.claimOne(in, "a")
		e.same("lease expiry", granted.Lease.ExpiresAt, now+45_000)
		job := e.mustJob(site, "a")
		e.same("stored lease expiry", job.ClaimedBy.LeaseExpiresAt, now+45_000)
		e.same("awaiting until", job.AwaitingUntil, now+store.AwaitingPayloadMs)
	}},
}
