package sitestoretest

import (
	"testing"

	"github.com/byorelay/byorelay/internal/sitestore"
)

func expiryCases() []testCase {
	return []testCase{
		{"a queued job expires once claimableAt + ttl has passed, not a millisecond before", func(t *testing.T, e Env) {
			in := job("a", "alice")
			in.TTLMs = 1000
			e.create(t, in)
			e.advance(999)
			if changed, err := e.Store.ExpireDue(ctx); err != nil || len(changed) != 0 {
				t.Fatalf("early expiry: %v %v", ids(changed), err)
			}
			e.advance(1)
			changed, err := e.Store.ExpireDue(ctx)
			if err != nil || !equal(ids(changed), []string{"a"}) || changed[0].State != sitestore.StateExpired {
				t.Fatalf("expiry: %v %v", ids(changed), err)
			}
			if again, _ := e.Store.ExpireDue(ctx); len(again) != 0 {
				t.Fatal("expireDue is not idempotent")
			}
		}},
		{"a queued job expires at its absolute deadline, even a blocked one", func(t *testing.T, e Env) {
			in := job("blocked", "alice", "never")
			in.DeadlineAt = e.now() + 500
			e.create(t, in)
			e.advance(500)
			if _, err := e.Store.ExpireDue(ctx); err != nil {
				t.Fatal(err)
			}
			wantState(t, e, "blocked", sitestore.StateExpired)
		}},
		{"a blocked job never expires by TTL: its clock has not started", func(t *testing.T, e Env) {
			in := job("blocked", "alice", "never")
			in.TTLMs = 100
			e.create(t, in)
			e.advance(1_000_000)
			if _, err := e.Store.ExpireDue(ctx); err != nil {
				t.Fatal(err)
			}
			wantState(t, e, "blocked", sitestore.StateQueued)
		}},
		{"a lapsed lease is reclaimed before the TTL is judged, and the TTL clock restarts", func(t *testing.T, e Env) {
			in := job("a", "alice")
			in.TTLMs = 5000
			e.create(t, in)
			e.claimOne(t, "r1", "alice") // lease 10 s, longer than the TTL
			e.advance(10_000)
			changed, err := e.Store.ExpireDue(ctx)
			if err != nil || len(changed) != 1 {
				t.Fatalf("sweep: %v %v", ids(changed), err)
			}
			got := e.get(t, "a")
			if got.State != sitestore.StateQueued || got.Lease != nil || got.ClaimableAt != e.now() {
				t.Fatalf("reclaimed: %+v", got)
			}
			e.advance(4999)
			if _, err := e.Store.ExpireDue(ctx); err != nil {
				t.Fatal(err)
			}
			wantState(t, e, "a", sitestore.StateQueued)
		}},
		{"claim sweeps first: a job past its TTL is never handed out", func(t *testing.T, e Env) {
			in := job("a", "alice")
			in.TTLMs = 100
			e.create(t, in)
			e.advance(100)
			if jobs := e.claim(t, "r1", "alice", 1, generate); len(jobs) != 0 {
				t.Fatal("claimed an expired job")
			}
			wantState(t, e, "a", sitestore.StateExpired)
		}},
		{"a lapsed lease is offered again at the next claim without a sweep", func(t *testing.T, e Env) {
			e.create(t, job("a", "alice"))
			first := e.claimOne(t, "r1", "alice")
			e.advance(10_000)
			second := e.claimOne(t, "r2", "alice")
			if second.ID != first.ID || second.Lease.ID == first.Lease.ID {
				t.Fatalf("reclaim: %+v", second)
			}
		}},
		{"a finished job never expires", func(t *testing.T, e Env) {
			in := job("a", "alice")
			in.TTLMs = 100
			e.create(t, in)
			e.complete(t, e.claimOne(t, "r1", "alice"), "r1", okOutcome())
			e.advance(1000)
			if _, err := e.Store.ExpireDue(ctx); err != nil {
				t.Fatal(err)
			}
			wantState(t, e, "a", sitestore.StateOK)
		}},
	}
}
