package sitestoretest

import (
	"testing"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

func completeCases() []testCase {
	return []testCase{
		{"the holder's result is recorded and the lease dropped, the grant remembered", func(t *testing.T, e Env) {
			e.create(t, job("a", "alice"))
			j := e.claimOne(t, "r1", "alice")
			res := e.complete(t, j, "r1", okOutcome())
			if !res.Accepted || res.Duplicate || res.Job.State != sitestore.StateOK {
				t.Fatalf("complete: %+v", res)
			}
			got := e.get(t, "a")
			if got.Lease != nil || got.CompletedByLeaseID != j.Lease.ID || got.Outcome.TextOrEmpty() != "done" || got.Provenance.RunnerID != "r1" {
				t.Fatalf("stored: %+v", got)
			}
		}},
		{"outcomes map to states: error and canceled", func(t *testing.T, e Env) {
			e.create(t, job("a", "alice"))
			e.create(t, job("b", "alice"))
			e.complete(t, e.claimOne(t, "r1", "alice"), "r1", protocol.FailedOutcome("boom", "it broke", false))
			e.complete(t, e.claimOne(t, "r1", "alice"), "r1", protocol.CanceledOutcome())
			wantState(t, e, "a", sitestore.StateError)
			wantState(t, e, "b", sitestore.StateCanceled)
		}},
		{"a replay by the device and grant that finished it is a duplicate; the first outcome stays", func(t *testing.T, e Env) {
			e.create(t, job("a", "alice"))
			j := e.claimOne(t, "r1", "alice")
			e.complete(t, j, "r1", protocol.OKOutcome("the answer that counts"))
			res := e.complete(t, j, "r1", protocol.OKOutcome("SECOND ANSWER"))
			if res.Accepted || !res.Duplicate {
				t.Fatalf("replay: %+v", res)
			}
			if got := e.get(t, "a"); got.Outcome.TextOrEmpty() != "the answer that counts" {
				t.Fatalf("replay overwrote the outcome: %q", got.Outcome.TextOrEmpty())
			}
		}},
		{"terminal is tested before the holder: another device with the same lease id is refused plainly", func(t *testing.T, e Env) {
			e.create(t, job("a", "alice"))
			j := e.claimOne(t, "r1", "alice")
			e.complete(t, j, "r1", okOutcome())
			if res := e.complete(t, j, "r2", protocol.OKOutcome("forged")); res.Accepted || res.Duplicate {
				t.Fatalf("another device: %+v", res)
			}
		}},
		{"a result under a lapsed lease is refused once the job was granted again", func(t *testing.T, e Env) {
			e.create(t, job("a", "alice"))
			dead := e.claimOne(t, "r1", "alice")
			e.advance(10_000)
			alive := e.claimOne(t, "r2", "alice")
			if res := e.complete(t, dead, "r1", protocol.OKOutcome("late")); res.Accepted || res.Duplicate {
				t.Fatalf("late result: %+v", res)
			}
			if res := e.complete(t, alive, "r2", protocol.OKOutcome("current")); !res.Accepted {
				t.Fatalf("current holder: %+v", res)
			}
			if got := e.get(t, "a"); got.Outcome.TextOrEmpty() != "current" {
				t.Fatalf("recorded %q", got.Outcome.TextOrEmpty())
			}
		}},
		{"another runner presenting the holder's lease id cannot complete the job", func(t *testing.T, e Env) {
			e.create(t, job("a", "alice"))
			j := e.claimOne(t, "r1", "alice")
			res, err := e.Store.Complete(ctx, sitestore.CompleteInput{JobID: "a", RunnerID: "r2",
				Holder: sitestore.HolderByLease(j.Lease.ID, "r2"), Outcome: protocol.OKOutcome("stolen")})
			if err != nil || res.Accepted {
				t.Fatalf("a stranger with the lease id: %+v %v", res, err)
			}
			wantState(t, e, "a", sitestore.StateClaimed)
		}},
		{"an expired job refuses a result", func(t *testing.T, e Env) {
			in := job("a", "alice")
			in.DeadlineAt = e.now() + 5000
			e.create(t, in)
			j := e.claimOne(t, "r1", "alice")
			if _, ok, _ := e.Store.Adopt(ctx, sitestore.AdoptInput{JobID: "a", LeaseID: j.Lease.ID, ExpiresAt: j.Lease.ExpiresAt}); !ok {
				t.Fatal("adopt of the current lease")
			}
			e.advance(6000)
			if _, err := e.Store.ExpireDue(ctx); err != nil {
				t.Fatal(err)
			}
			wantState(t, e, "a", sitestore.StateExpired)
			if res := e.complete(t, j, "r1", okOutcome()); res.Accepted {
				t.Fatal("an expired job accepted a result")
			}
		}},
		{"an unknown job is answered with no job", func(t *testing.T, e Env) {
			res, err := e.Store.Complete(ctx, sitestore.CompleteInput{JobID: "nope", RunnerID: "r1", Holder: sitestore.HolderByLease("x", "r1"), Outcome: okOutcome()})
			if err != nil || res.Accepted || res.Job != nil {
				t.Fatalf("unknown: %+v %v", res, err)
			}
		}},
		{"a dependent becomes claimable when its last dependency completes ok, not before", func(t *testing.T, e Env) {
			e.create(t, job("a", "alice"))
			e.create(t, job("b", "alice"))
			e.create(t, job("c", "alice", "a", "b"))
			ja := e.claimOne(t, "r1", "alice")
			jb := e.claimOne(t, "r1", "alice")
			e.advance(100)
			e.complete(t, ja, "r1", okOutcome())
			if got := e.get(t, "c"); got.ClaimableAt != 0 {
				t.Fatalf("unblocked with one dependency left: %+v", got)
			}
			e.advance(100)
			e.complete(t, jb, "r1", okOutcome())
			if got := e.get(t, "c"); got.ClaimableAt != e.now() {
				t.Fatalf("claimableAt %d, want %d", got.ClaimableAt, e.now())
			}
			if jobs := e.claim(t, "r1", "alice", 5, generate); !equal(ids(jobs), []string{"c"}) {
				t.Fatalf("claimed %v", ids(jobs))
			}
		}},
		{"a dependency that ends in error leaves its dependent blocked for good", func(t *testing.T, e Env) {
			e.create(t, job("a", "alice"))
			e.create(t, job("c", "alice", "a"))
			e.complete(t, e.claimOne(t, "r1", "alice"), "r1", protocol.FailedOutcome("x", "y", false))
			e.advance(sitestore.DefaultTTLMs * 3)
			if _, err := e.Store.ExpireDue(ctx); err != nil {
				t.Fatal(err)
			}
			if got := e.get(t, "c"); got.ClaimableAt != 0 || got.State != sitestore.StateQueued {
				t.Fatalf("dependent of an errored job: %+v", got)
			}
		}},
		{"a job depending on an id created later unblocks when that job completes ok", func(t *testing.T, e Env) {
			e.create(t, job("c", "alice", "later"))
			e.create(t, job("later", "alice"))
			e.complete(t, e.claimOne(t, "r1", "alice"), "r1", okOutcome())
			if got := e.get(t, "c"); got.ClaimableAt == 0 {
				t.Fatal("still blocked")
			}
		}},
	}
}
