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
