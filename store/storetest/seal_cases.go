package storetest

import (
	"github.com/byorelay/byorelay/store"
)

var sealCases = []testCase{
	{"takes the payload for a claimed job and makes it ready", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		e.claimOne(claimArgs(), "a")
		e.same("seal", e.seal("a"), store.SealResult{State: store.StateReady})
		job := e.mustJob(site, "a")
		e.same("state", job.State, store.StateReady)
		e.same("payload", job.Payload, &envelope)
		e.same("awaiting until", job.AwaitingUntil, int64(0))
	}},

	{"refuses a seal for a job it does not hold, or another site's", func(e *env) {
		e.enqueue("site_other", stub("theirs", "alice"))
		e.same("absent", e.seal("nope"), store.SealResult{Refused: store.RefusedNotFound})
		e.same("another site's", e.seal("theirs"), store.SealResult{Refused: store.RefusedNotFound})
	}},

	{"refuses a seal that is too late, naming the state it found", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		e.same("queued", e.seal("a"), store.SealResult{Refused: store.RefusedTooLate, Was: store.StateQueued})
		e.claimOne(claimArgs(), "a")
		e.seal("a")
		e.same("ready", e.seal("a"), store.SealResult{Refused: store.RefusedTooLate, Was: store.StateReady})
	}},

	{"resets the seal attempts and keeps the re-offer", func(e *env) {
		// SealAttempts counts consecutive failures to seal; left standing it
		// would become a lifetime quota.
		e.enqueue(site, stub("a", "alice"))
		e.claimOne(claimArgs(), "a")
		e.advance(store.AwaitingPayloadMs)
		e.sweep()
		e.same("attempts after one lapse", e.mustJob(site, "a").SealAttempts, 1)
		e.claimOne(claimArgs(), "a")
		e.seal("a")
		job := e.mustJob(site, "a")
		e.same("attempts after the seal", job.SealAttempts, 0)
		e.same("re-offer", job.ReofferTo, "runner_1")
	}},
}
