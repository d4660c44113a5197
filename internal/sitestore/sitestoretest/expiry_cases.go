package sitestoretest

import (
	"github.com/byorelay/byorelay/internal/sitestore"
)

var expiryCases = []testCase{
	{"a queued job expires once claimableAt + ttl has passed, not a millisecond before", func(e *env) {
		in := job("a", "alice")
		in.TTLMs = 1000
		e.create(in)
		e.advance(999)
		if changed, err := e.s.ExpireDue(e.ctx); err != nil || len(changed) != 0 {
			e.Fatalf("early expiry: %v %v", ids(changed), err)
		}
		e.advance(1)
		changed, err := e.s.ExpireDue(e.ctx)
		if err != nil || !equal(ids(changed), []string{"a"}) || changed[0].State != sitestore.StateExpired {
			e.Fatalf("expiry: %v %v", ids(changed), err)
		}
		if again, _ := e.s.ExpireDue(e.ctx); len(again) != 0 {
			e.Fatal("expireDue is not idempotent")
		}
	}},
	{"a queued job expires at its absolute deadline, even a blocked one", func(e *env) {
		in := job("blocked", "alice", "never")
		in.DeadlineAt = e.now() + 500
		e.create(in)
		e.advance(500)
		if _, err := e.s.ExpireDue(e.ctx); err != nil {
			e.Fatal(err)
		}
		e.wantState("blocked", sitestore.StateExpired)
	}},
	{"a blocked job never expires by TTL: its clock has not started", func(e *env) {
		in := job("blocked", "alice", "never")
		in.TTLMs = 100
		e.create(in)
		e.advance(1_000_000)
		if _, err := e.s.ExpireDue(e.ctx); err != nil {
			e.Fatal(err)
		}
		e.wantState("blocked", sitestore.StateQueued)
	}},
	{"a lapsed lease is reclaimed before the TTL is judged, and the TTL clock restarts", func(e *env) {
		in := job("a", "alice")
		in.TTLMs = 5000
		e.create(in)
		e.claimOne("r1", "alice") // lease 10 s, longer than the TTL
		e.advance(10_000)
		changed, err := e.s.ExpireDue(e.ctx)
		if err != nil || len(changed) != 1 {
			e.Fatalf("sweep: %v %v", ids(changed), err)
		}
		got := e.get("a")
		if got.State != sitestore.StateQueued || got.Lease != nil || got.ClaimableAt != e.now() {
			e.Fatalf("reclaimed: %+v", got)
		}
		e.advance(4999)
		if _, err := e.s.ExpireDue(e.ctx); err != nil {
			e.Fatal(err)
		}
		e.wantState("a", sitestore.StateQueued)
	}},
	{"claim sweeps first: a job past its TTL is never handed out", func(e *env) {
		in := job("a", "alice")
		in.TTLMs = 100
		e.create(in)
		e.advance(100)
		if jobs := e.claim("r1", "alice", 1, generate); len(jobs) != 0 {
			e.Fatal("claimed an expired job")
		}
		e.wantState("a", sitestore.StateExpired)
	}},
	{"a lapsed lease is offered again at the next claim without a sweep", func(e *env) {
		e.create(job("a", "alice"))
		first := e.claimOne("r1", "alice")
		e.advance(10_000)
		second := e.claimOne("r2", "alice")
		if second.ID != first.ID || second.Lease.ID == first.Lease.ID {
			e.Fatalf("reclaim: %+v", second)
		}
	}},
	{"a job held and heartbeated past its absolute deadline expires at the next sweep, and its late result is refused", func(e *env) {
		in := job("a", "alice")
		in.DeadlineAt = e.now() + 25_000
		e.create(in)
		held := e.claimOne("r1", "alice") // 10 s leases, renewed every 5 s
		for range 4 {
			e.advance(5_000)
			if res := e.renew("r1", held); len(res.Lost) != 0 {
				e.Fatalf("renewal before the deadline lost the lease: %+v", res)
			}
		}
		e.advance(5_000)
		// At the deadline, with the lease renewed 5 s ago and live.
		if got := e.get("a"); got.State != sitestore.StateRunning || got.Lease == nil || got.Lease.ExpiresAt <= e.now() {
			e.Fatalf("the lease should be live at the deadline: %+v", got)
		}
		changed, err := e.s.ExpireDue(e.ctx)
		if err != nil || !equal(ids(changed), []string{"a"}) {
			e.Fatalf("the sweep at the deadline changed %v (%v), want [a]", ids(changed), err)
		}
		e.wantState("a", sitestore.StateExpired)
		if got := e.get("a"); got.Lease != nil {
			e.Fatalf("an expired job keeps its lease: %+v", got.Lease)
		}
		res := e.complete(held, "r1", okOutcome())
		if res.Accepted || !res.PastDeadline {
			e.Fatalf("late result: %+v", res)
		}
		if got := e.get("a"); got.State != sitestore.StateExpired || got.Outcome != nil {
			e.Fatalf("the late result was recorded: %+v", got)
		}
		if lost := e.renew("r1", held).Lost; len(lost) != 1 {
			e.Fatalf("a heartbeat after expiry kept the lease: %+v", lost)
		}
	}},
	{"a result after the absolute deadline is refused before any sweep, and the job expires in that write", func(e *env) {
		in := job("a", "alice")
		in.DeadlineAt = e.now() + 8_000
		e.create(in)
		held := e.claimOne("r1", "alice") // the lease outlives the deadline
		e.advance(8_000)
		res := e.complete(held, "r1", okOutcome())
		if res.Accepted || !res.PastDeadline || res.Job == nil || res.Job.State != sitestore.StateExpired {
			e.Fatalf("late result: %+v", res)
		}
		e.wantState("a", sitestore.StateExpired)
	}},
	{"a result one millisecond before the absolute deadline is accepted", func(e *env) {
		in := job("a", "alice")
		in.DeadlineAt = e.now() + 8_000
		e.create(in)
		held := e.claimOne("r1", "alice")
		e.advance(7_999)
		if res := e.complete(held, "r1", okOutcome()); !res.Accepted {
			e.Fatalf("result in time: %+v", res)
		}
		e.wantState("a", sitestore.StateOK)
	}},
	{"a finished job never expires", func(e *env) {
		in := job("a", "alice")
		in.TTLMs = 100
		e.create(in)
		e.complete(e.claimOne("r1", "alice"), "r1", okOutcome())
		e.advance(1000)
		if _, err := e.s.ExpireDue(e.ctx); err != nil {
			e.Fatal(err)
		}
		e.wantState("a", sitestore.StateOK)
	}},
}
