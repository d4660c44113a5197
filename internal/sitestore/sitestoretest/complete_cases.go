package sitestoretest

import (
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

var completeCases = []testCase{
	{"the holder's result is recorded and the lease dropped, the grant remembered", func(e *env) {
		e.create(job("a", "alice"))
		j := e.claimOne("r1", "alice")
		res := e.complete(j, "r1", okOutcome())
		if !res.Accepted || res.Duplicate || res.Job.State != sitestore.StateOK {
			e.Fatalf("complete: %+v", res)
		}
		got := e.get("a")
		if got.Lease != nil || got.CompletedByLeaseID != j.Lease.ID || got.Outcome.TextOrEmpty() != "done" || got.Provenance.RunnerID != "r1" {
			e.Fatalf("stored: %+v", got)
		}
	}},
	{"outcomes map to states: error and canceled", func(e *env) {
		e.create(job("a", "alice"))
		e.create(job("b", "alice"))
		e.complete(e.claimOne("r1", "alice"), "r1", protocol.FailedOutcome("boom", "it broke", false))
		e.complete(e.claimOne("r1", "alice"), "r1", protocol.CanceledOutcome())
		e.wantState("a", sitestore.StateError)
		e.wantState("b", sitestore.StateCanceled)
	}},
	{"a replay by the device and grant that finished it is a duplicate; the first outcome stays", func(e *env) {
		e.create(job("a", "alice"))
		j := e.claimOne("r1", "alice")
		e.complete(j, "r1", protocol.OKOutcome("the answer that counts"))
		res := e.complete(j, "r1", protocol.OKOutcome("SECOND ANSWER"))
		if res.Accepted || !res.Duplicate {
			e.Fatalf("replay: %+v", res)
		}
		if got := e.get("a"); got.Outcome.TextOrEmpty() != "the answer that counts" {
			e.Fatalf("replay overwrote the outcome: %q", got.Outcome.TextOrEmpty())
		}
	}},
	{"terminal is tested before the holder: another device with the same lease id is refused plainly", func(e *env) {
		e.create(job("a", "alice"))
		j := e.claimOne("r1", "alice")
		e.complete(j, "r1", okOutcome())
		if res := e.complete(j, "r2", protocol.OKOutcome("forged")); res.Accepted || res.Duplicate {
			e.Fatalf("another device: %+v", res)
		}
	}},
	{"a result under a lapsed lease is refused once the job was granted again", func(e *env) {
		e.create(job("a", "alice"))
		dead := e.claimOne("r1", "alice")
		e.advance(10_000)
		alive := e.claimOne("r2", "alice")
		if res := e.complete(dead, "r1", protocol.OKOutcome("late")); res.Accepted || res.Duplicate {
			e.Fatalf("late result: %+v", res)
		}
		if res := e.complete(alive, "r2", protocol.OKOutcome("current")); !res.Accepted {
			e.Fatalf("current holder: %+v", res)
		}
		if got := e.get("a"); got.Outcome.TextOrEmpty() != "current" {
			e.Fatalf("recorded %q", got.Outcome.TextOrEmpty())
		}
	}},
	{"another runner presenting the holder's lease id cannot complete the job", func(e *env) {
		e.create(job("a", "alice"))
		j := e.claimOne("r1", "alice")
		res, err := e.s.Complete(e.ctx, sitestore.CompleteInput{JobID: "a", RunnerID: "r2",
			Holder: sitestore.HolderByLease(j.Lease.ID, "r2"), Outcome: protocol.OKOutcome("stolen")})
		if err != nil || res.Accepted {
			e.Fatalf("a stranger with the lease id: %+v %v", res, err)
		}
		e.wantState("a", sitestore.StateClaimed)
	}},
	{"an expired job refuses a result", func(e *env) {
		in := job("a", "alice")
		in.DeadlineAt = e.now() + 5000
		e.create(in)
		j := e.claimOne("r1", "alice")
		if _, ok, _ := e.s.Adopt(e.ctx, sitestore.AdoptInput{JobID: "a", LeaseID: j.Lease.ID, ExpiresAt: j.Lease.ExpiresAt}); !ok {
			e.Fatal("adopt of the current lease")
		}
		e.advance(6000)
		if _, err := e.s.ExpireDue(e.ctx); err != nil {
			e.Fatal(err)
		}
		e.wantState("a", sitestore.StateExpired)
		if res := e.complete(j, "r1", okOutcome()); res.Accepted {
			e.Fatal("an expired job accepted a result")
		}
	}},
	{"an unknown job is answered with no job", func(e *env) {
		res, err := e.s.Complete(e.ctx, sitestore.CompleteInput{JobID: "nope", RunnerID: "r1", Holder: sitestore.HolderByLease("x", "r1"), Outcome: okOutcome()})
		if err != nil || res.Accepted || res.Job != nil {
			e.Fatalf("unknown: %+v %v", res, err)
		}
	}},
	{"a dependent becomes claimable when its last dependency completes ok, not before", func(e *env) {
		e.create(job("a", "alice"))
		e.create(job("b", "alice"))
		e.create(job("c", "alice", "a", "b"))
		ja := e.claimOne("r1", "alice")
		jb := e.claimOne("r1", "alice")
		e.advance(100)
		e.complete(ja, "r1", okOutcome())
		if got := e.get("c"); got.ClaimableAt != 0 {
			e.Fatalf("unblocked with one dependency left: %+v", got)
		}
		e.advance(100)
		e.complete(jb, "r1", okOutcome())
		if got := e.get("c"); got.ClaimableAt != e.now() {
			e.Fatalf("claimableAt %d, want %d", got.ClaimableAt, e.now())
		}
		if jobs := e.claim("r1", "alice", 5, generate); !equal(ids(jobs), []string{"c"}) {
			e.Fatalf("claimed %v", ids(jobs))
		}
	}},
	{"a dependency that ends in error leaves its dependent blocked for good", func(e *env) {
		e.create(job("a", "alice"))
		e.create(job("c", "alice", "a"))
		e.complete(e.claimOne("r1", "alice"), "r1", protocol.FailedOutcome("x", "y", false))
		e.advance(sitestore.DefaultTTLMs * 3)
		if _, err := e.s.ExpireDue(e.ctx); err != nil {
			e.Fatal(err)
		}
		if got := e.get("c"); got.ClaimableAt != 0 || got.State != sitestore.StateQueued {
			e.Fatalf("dependent of an errored job: %+v", got)
		}
	}},
	{"a job depending on an id created later unblocks when that job completes ok", func(e *env) {
		e.create(job("c", "alice", "later"))
		e.create(job("later", "alice"))
		e.complete(e.claimOne("r1", "alice"), "r1", okOutcome())
		if got := e.get("c"); got.ClaimableAt == 0 {
			e.Fatal("still blocked")
		}
	}},
}
