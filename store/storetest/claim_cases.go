package storetest

import (
	"fmt"
	"regexp"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

var claimCases = []testCase{
	{"grants a job as its stub plus a UUID lease, and records the holder", claimGrantShape},
	{"grants only what the routes allow", func(e *env) {
		e.enqueue(site, stub("mine", "alice"))
		e.enqueue(site, stub("theirs", "mallory"))
		e.enqueue("site_other", stub("elsewhere", "alice"))
		e.same("granted", ids(e.claim(claimArgs())), []string{"mine"})
		e.wantState(site, "theirs", store.StateQueued)
		e.wantState("site_other", "elsewhere", store.StateQueued)
	}},
	{"matches routes as (site, owner) pairs, not as sites times owners", func(e *env) {
		// Consent binds a user to a site: a device with routes (A, alice)
		// and (B, bob) has no route to (A, bob).
		a := stub("a-bob", "bob")
		a.Audience = "team"
		e.enqueue("site_a", a)
		b := stub("b-alice", "alice")
		e.enqueue("site_b", b)
		in := claimArgs()
		in.Routes = []store.Route{{SiteID: "site_a", Owner: "alice"}, {SiteID: "site_b", Owner: "bob"}}
		e.same("granted", ids(e.claim(in)), []string{})
	}},
	{"honours a private job's audience", func(e *env) {
		// A roster owner's machine may run alice's work in general, but
		// private is the audience a user picks because they want their
		// own machine.
		e.enqueue(site, stub("private", "alice"))
		in := claimArgs()
		in.Owner = "owner"
		in.Routes = []store.Route{{SiteID: site, Owner: "owner"}, {SiteID: site, Owner: "alice"}}
		e.same("granted", ids(e.claim(in)), []string{})
		e.wantState(site, "private", store.StateQueued)
	}},
	{"still offers a private job to its owner's own machine", func(e *env) {
		e.enqueue(site, stub("private", "alice"))
		e.claimOne(claimArgs(), "private")
	}},
	{"offers a team job to a roster owner's machine the routes admit", func(e *env) {
		team := stub("team", "alice")
		team.Audience = "team"
		e.enqueue(site, team)
		in := claimArgs()
		in.RunnerID, in.Owner, in.Device = "runner_owner", "owner", device("runner_owner")
		in.Routes = []store.Route{{SiteID: site, Owner: "owner"}, {SiteID: site, Owner: "alice"}}
		e.claimOne(in, "team")
		if h := e.mustJob(site, "team").ClaimedBy; h == nil || h.Owner != "owner" {
			e.Fatalf("holder = %+v, want the device's owner", h)
		}
	}},
	{"offers a job to any device that serves its kind", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		in := asRunner("runner_any")
		in.Kinds = []string{"llm.chat", "llm.generate"}
		e.claimOne(in, "a")
	}},
	{"does not offer a job to a device that serves a different kind", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		in := asRunner("runner_chat")
		in.Kinds = []string{"llm.chat"}
		e.same("granted", ids(e.claim(in)), []string{})
		e.wantState(site, "a", store.StateQueued)
	}},
	{"grants no more than max, in enqueue order", func(e *env) {
		for _, id := range []string{"a", "b", "c"} {
			e.enqueue(site, stub(id, "alice"))
		}
		in := claimArgs()
		in.Max = 1
		e.claimOne(in, "a")
		e.claimOne(in, "b")
	}},
	{"hands one pair at most two unsealed grants at a time", func(e *env) {
		// The leak is the ratio of device identities to seals: a site that
		// never seals must learn at most two. Ten queued, max 10, one call: two.
		for i := range 10 {
			e.enqueue(site, stub(fmt.Sprintf("j%d", i), "alice"))
		}
		e.same("granted", ids(e.claim(claimArgs())), []string{"j0", "j1"})
		e.same("a second device gets nothing more", ids(e.claim(asRunner("runner_2"))), []string{})
		e.wantState(site, "j2", store.StateQueued)
	}},
	{"counts the cap per owner, not per site", func(e *env) {
		// A flat per-site cap would throttle a product to two in-flight
		// jobs across all its users.
		for _, id := range []string{"a1", "a2", "a3"} {
			e.enqueue(site, stub(id, "alice"))
		}
		for _, id := range []string{"b1", "b2", "b3"} {
			e.enqueue(site, stub(id, "bob"))
		}
		e.same("alice gets her two", ids(e.claim(claimArgs())), []string{"a1", "a2"})
		bob := claimArgs()
		bob.RunnerID, bob.Owner, bob.Device = "runner_2", "bob", device("runner_2")
		bob.Routes = []store.Route{{SiteID: site, Owner: "bob"}}
		e.same("bob gets his own two", ids(e.claim(bob)), []string{"b1", "b2"})
	}},
	{"counts the cap per site, for one owner on two sites", func(e *env) {
		e.enqueue(site, stub("a1", "alice"))
		e.enqueue(site, stub("a2", "alice"))
		e.enqueue(site, stub("a3", "alice"))
		e.enqueue("site_other", stub("o1", "alice"))
		in := claimArgs()
		in.Routes = append(in.Routes, store.Route{SiteID: "site_other", Owner: "alice"})
		e.same("granted", ids(e.claim(in)), []string{"a1", "a2", "o1"})
	}},
	{"lets a sealing site keep working, which is every honest one", func(e *env) {
		for _, id := range []string{"a", "b", "c", "d"} {
			e.enqueue(site, stub(id, "alice"))
		}
		first := e.claim(claimArgs())
		e.same("first claim", ids(first), []string{"a", "b"})
		for _, c := range first {
			e.same("seal "+c.ID, e.seal(c.ID), store.SealResult{State: store.StateReady})
		}
		e.same("the slots came back", ids(e.claim(claimArgs())), []string{"c", "d"})
	}},
	{"re-offers an abandoned grant only to the device that abandoned it", func(e *env) {
		// The sticky re-offer: repeated abandonment reveals one device
		// however long somebody waits.
		e.enqueue(site, stub("a", "alice"))
		e.claimOne(claimArgs(), "a")
		e.advance(store.AwaitingPayloadMs + 1_000) // the site never seals

		e.same("a device that never held it gets nothing", ids(e.claim(asRunner("runner_2"))), []string{})
		e.wantState(site, "a", store.StateQueued)
		e.claimOne(claimArgs(), "a")
	}},
	{"leaves an unabandoned job free for whoever asks", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		e.claimOne(asRunner("runner_9"), "a")
	}},
	{"keeps the re-offer after a released claim by its sticky device", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		e.claimOne(claimArgs(), "a")
		e.advance(store.AwaitingPayloadMs)
		again := e.claimOne(claimArgs(), "a")
		e.same("released", e.release("runner_1", store.ReleaseShutdown, 0, grant(again)), []string{"a"})
		e.same("another device still gets nothing", ids(e.claim(asRunner("runner_2"))), []string{})
		e.claimOne(claimArgs(), "a")
	}},
	{"stops offering a job past its deadline, and drops it", func(e *env) {
		late := stub("late", "alice")
		late.DeadlineAt = e.nowMs() - 1_000
		e.enqueue(site, late)
		e.same("granted", ids(e.claim(claimArgs())), []string{})
		e.wantAbsent(site, "late")
	}},
	{"sweeps before it claims", func(e *env) {
		// A claim must not be blocked by a grant whose window already ran
		// out just because no sweep has happened since.
		e.enqueue(site, stub("a", "alice"))
		e.enqueue(site, stub("b", "alice"))
		e.enqueue(site, stub("c", "alice"))
		e.same("first", ids(e.claim(claimArgs())), []string{"a", "b"})
		e.advance(store.AwaitingPayloadMs)
		e.same("after the window, without a sweep", ids(e.claim(asRunner("runner_2"))), []string{"c"})
	}},
	{"does not hand out a stub it cannot parse", claimSkipsUnparseable},
	{"hands back the awaiting deadline it stamped", claimHandsBackAwaiting},
}

// claimHandsBackAwaiting: a claim's answer carries each grant's
// AwaitingUntil exactly as stamped on the job, at the default window and
// at a configured one, for every grant of a batch, because the relay wakes
// the sweeper for the earliest of them and must agree with the sweep
// without knowing the window.
func claimHandsBackAwaiting(e *env) {
	for _, window := range []int64{0, 2_500} {
		opts := storeOptions(e)
		opts.AwaitingPayloadMs = window
		e.rebuild(opts)
		e.enqueue(site, stub("a", "alice"))
		e.enqueue(site, stub("b", "alice"))
		e.advance(7)
		now := e.nowMs()
		granted := e.claim(claimArgs())
		e.same("granted", ids(granted), []string{"a", "b"})
		for _, g := range granted {
			stamped := e.mustJob(site, g.ID).AwaitingUntil
			e.same("returned awaiting until of "+g.ID, g.AwaitingUntil, stamped)
			e.same("stamped awaiting until of "+g.ID, stamped, now+opts.AwaitingMs())
		}
	}
}

func claimGrantShape(e *env) {
	e.enqueue(site, stub("a", "alice"))
	now := e.nowMs()
	in := claimArgs()
	in.LeaseMs = 45_000
	granted := e.claimOne(in, "a")

	if !uuidV4.MatchString(granted.Lease.ID) {
		e.Fatalf("lease id %q is not a lowercase v4 UUID", granted.Lease.ID)
	}
	e.same("claimed", granted, store.Claimed{
		ClaimedStub: protocol.Claimed(stub("a", "alice"), protocol.Lease{
			ID: granted.Lease.ID, RunnerID: "runner_1", ExpiresAt: now + 45_000,
		}, nil),
		AwaitingUntil: now + store.AwaitingPayloadMs,
	})

	job := e.mustJob(site, "a")
	e.same("state", job.State, store.StateAwaitingPayload)
	e.same("holder", job.ClaimedBy, &store.Holder{
		RunnerID: "runner_1", Owner: "alice", Device: device("runner_1"),
		LeaseID: granted.Lease.ID, LeaseExpiresAt: now + 45_000,
	})
	e.same("awaiting until", job.AwaitingUntil, now+store.AwaitingPayloadMs)

	// A second claim gets a different grant for a different job.
	e.enqueue(site, stub("b", "alice"))
	other := e.claimOne(claimArgs(), "b")
	if other.Lease.ID == granted.Lease.ID {
		e.Fatalf("two grants share lease id %q", other.Lease.ID)
	}
}

func claimSkipsUnparseable(e *env) {
	// A row written before a wire change that comes back in a claim makes the
	// daemon's strict parse reject the whole response, so two dead rows would
	// deny claims to every device. A routing store outlives the
	// deployment that filled it.
	w, ok := e.s.(RawStubWriter)
	if !ok {
		e.Skip("store holds typed stubs and cannot hold an unparseable one; passes by construction")
	}
	e.enqueue(site, stub("good", "alice"))
	e.enqueue(site, stub("old", "alice"))
	// What an older version wrote: a stub with no site.
	legacy := []byte(`{"id":"old","kind":"llm.generate","owner":"alice","audience":"private","sizeClass":"small","streaming":false,"deadlineAt":4102444800000}`)
	e.check(w.WriteRawStub(e.ctx, site, "old", legacy))

	e.same("the good one is still handed out", ids(e.claim(claimArgs())), []string{"good"})
	e.wantState(site, "old", store.StateQueued)
}
