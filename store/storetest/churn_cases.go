package storetest

import (
	"github.com/byorelay/byorelay/store"
)

// abandonRound is one round of a site that claims and never seals: runner_1
// claims what it may (two, the pair's cap), the window runs out and a sweep
// requeues or evicts them. It returns how many grants lapsed.
func (e *env) abandonRound() int {
	e.Helper()
	granted := e.claim(claimArgs())
	e.advance(store.AwaitingPayloadMs)
	swept := e.sweep()
	lapsed := len(swept.Requeued) + len(swept.Removed)
	if lapsed != len(granted) {
		e.Fatalf("granted %d, but %d lapsed", len(granted), lapsed)
	}
	return lapsed
}

func (e *env) enqueueMany(owner string, ids ...string) {
	e.Helper()
	for _, id := range ids {
		e.enqueue(site, stub(id, owner))
	}
}

var churnCases = []testCase{
	{"reports a pair that lets six grants lapse unsealed inside five minutes", func(e *env) {
		// An honest site never gets here; a walk crosses it inside a
		// minute.
		e.enqueueMany("alice", "a", "b", "c", "d", "e", "f")
		e.abandonRound()
		e.abandonRound()
		e.same("reports after four lapses", len(e.churn.all()), 0)
		e.abandonRound()
		e.same("reports after six lapses", e.churn.all(), []store.UnsealedChurn{
			{SiteID: site, Owner: "alice", Expiries: 6, WindowMs: store.ChurnWindowMs},
		})
	}},

	{"reports a pair at most once an hour", func(e *env) {
		// An alert that repeats is an alert nobody reads.
		e.enqueueMany("alice", "a", "b", "c", "d", "e", "f")
		for range 4 {
			e.abandonRound()
		}
		e.same("reports after eight lapses", len(e.churn.all()), 1)
		e.advance(store.ChurnQuietMs)
		for range 3 {
			e.abandonRound()
		}
		reports := e.churn.all()
		e.same("reports an hour later", len(reports), 2)
		// The window trimmed the old lapses: this is a fresh six.
		e.same("second report", reports[1], store.UnsealedChurn{SiteID: site, Owner: "alice", Expiries: 6, WindowMs: store.ChurnWindowMs})
	}},

	{"counts only lapses inside the window", func(e *env) {
		e.enqueueMany("alice", "a", "b")
		e.abandonRound()
		e.advance(3 * 60_000)
		e.abandonRound()
		e.advance(3 * 60_000)
		e.abandonRound() // the first round's two are now over five minutes old
		e.same("reports", len(e.churn.all()), 0)
	}},

	{"counts each pair on its own", func(e *env) {
		e.enqueueMany("alice", "a1", "a2", "a3")
		e.enqueueMany("bob", "b1", "b2", "b3")
		bob := claimArgs()
		bob.RunnerID, bob.Owner, bob.Device = "runner_2", "bob", device("runner_2")
		bob.Routes = []store.Route{{SiteID: site, Owner: "bob"}}
		for range 3 {
			e.claim(claimArgs())
			e.claim(bob)
			e.advance(store.AwaitingPayloadMs)
			e.sweep()
		}
		e.same("reports", len(e.churn.all()), 2)
	}},

	{"goes on sweeping when the reporter panics", func(e *env) {
		// A report is evidence about the sweep, not part of it.
		e.rebuild(store.Options{OnChurn: func(store.UnsealedChurn) { panic("mail server down") }})
		e.enqueueMany("alice", "a", "b")
		for range 2 {
			e.abandonRound()
		}
		e.claim(claimArgs())
		e.advance(store.AwaitingPayloadMs)
		swept := e.sweep()
		e.same("removed", jobIDs(swept.Removed), []string{"a", "b"})
		e.wantAbsent(site, "a")
	}},

	{"routes and sweeps without a reporter", func(e *env) {
		e.rebuild(store.Options{})
		e.enqueueMany("alice", "a", "b")
		for range 3 {
			e.abandonRound()
		}
		e.wantAbsent(site, "a")
	}},
}
