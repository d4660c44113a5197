package sitestoretest

import (
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

var leaseCases = []testCase{
	{"a heartbeat renews the runner's current grants and names every other one lost", func(e *env) {
		e.create(job("a", "alice"))
		e.create(job("b", "alice"))
		jobs := e.claim("r1", "alice", 2, generate)
		e.advance(4000)
		res, err := e.s.RenewLeases(e.ctx, sitestore.RenewInput{RunnerID: "r1", LeaseMs: 10_000, Leases: []protocol.GrantRef{
			{JobID: jobs[0].ID, LeaseID: jobs[0].Lease.ID},
			{JobID: jobs[1].ID, LeaseID: "stale-lease"},
			{JobID: "unknown", LeaseID: "x"},
		}})
		if err != nil {
			e.Fatal(err)
		}
		if len(res.Renewed) != 1 || res.Renewed[0].JobID != jobs[0].ID || res.Renewed[0].ExpiresAt != e.now()+10_000 {
			e.Fatalf("renewed %+v", res.Renewed)
		}
		want := []protocol.GrantRef{{JobID: jobs[1].ID, LeaseID: "stale-lease"}, {JobID: "unknown", LeaseID: "x"}}
		if len(res.Lost) != 2 || res.Lost[0] != want[0] || res.Lost[1] != want[1] {
			e.Fatalf("lost %+v", res.Lost)
		}
		got := e.get(jobs[0].ID)
		if got.State != sitestore.StateRunning || got.Lease.ID != jobs[0].Lease.ID || got.Lease.ExpiresAt != e.now()+10_000 {
			e.Fatalf("renewed job: %+v", got)
		}
	}},
	{"another runner cannot renew a grant by naming its lease id", func(e *env) {
		e.create(job("a", "alice"))
		j := e.claimOne("r1", "alice")
		res, err := e.s.RenewLeases(e.ctx, sitestore.RenewInput{RunnerID: "r2", LeaseMs: 99_000, Leases: []protocol.GrantRef{{JobID: "a", LeaseID: j.Lease.ID}}})
		if err != nil || len(res.Lost) != 1 || len(res.Renewed) != 0 {
			e.Fatalf("renew by a stranger: %+v %v", res, err)
		}
		if got := e.get("a"); got.Lease.ExpiresAt != j.Lease.ExpiresAt || got.State != sitestore.StateClaimed {
			e.Fatalf("a stranger's renewal moved the lease: %+v", got)
		}
	}},
	{"a lapsed lease is lost at the next heartbeat, not renewed", func(e *env) {
		e.create(job("a", "alice"))
		j := e.claimOne("r1", "alice")
		e.advance(10_000)
		res, err := e.s.RenewLeases(e.ctx, sitestore.RenewInput{RunnerID: "r1", LeaseMs: 10_000, Leases: []protocol.GrantRef{{JobID: "a", LeaseID: j.Lease.ID}}})
		if err != nil || len(res.Lost) != 1 {
			e.Fatalf("renew of a lapsed lease: %+v %v", res, err)
		}
		e.wantState("a", sitestore.StateQueued)
	}},
	{"adopt records a relay's lease on a queued job, and again with the same id", func(e *env) {
		e.create(job("a", "alice"))
		exp := e.now() + 60_000
		j, ok, err := e.s.Adopt(e.ctx, sitestore.AdoptInput{JobID: "a", LeaseID: "relay-lease", ExpiresAt: exp})
		if err != nil || !ok || j.State != sitestore.StateClaimed || j.Lease.RunnerID != "" || j.Lease.ID != "relay-lease" || j.Lease.ExpiresAt != exp {
			e.Fatalf("adopt: %+v ok=%v err=%v", j, ok, err)
		}
		if _, ok, _ := e.s.Adopt(e.ctx, sitestore.AdoptInput{JobID: "a", LeaseID: "relay-lease", ExpiresAt: exp + 1}); !ok {
			e.Fatal("re-adopting the same lease was refused")
		}
		if _, ok, _ := e.s.Adopt(e.ctx, sitestore.AdoptInput{JobID: "a", LeaseID: "another", ExpiresAt: exp}); ok {
			e.Fatal("a different lease was adopted over an existing one")
		}
		if _, ok, _ := e.s.Adopt(e.ctx, sitestore.AdoptInput{JobID: "nope", LeaseID: "x", ExpiresAt: exp}); ok {
			e.Fatal("an unknown job was adopted")
		}
	}},
	{"an adopted lease is never reclaimed by lease expiry, only by the job's deadline", func(e *env) {
		in := job("a", "alice")
		in.TTLMs = 50_000
		e.create(in)
		if _, ok, err := e.s.Adopt(e.ctx, sitestore.AdoptInput{JobID: "a", LeaseID: "relay", ExpiresAt: e.now() + 1000}); !ok || err != nil {
			e.Fatalf("adopt: %v %v", ok, err)
		}
		e.advance(2000)
		if _, err := e.s.ExpireDue(e.ctx); err != nil {
			e.Fatal(err)
		}
		e.wantState("a", sitestore.StateClaimed)
		e.advance(48_000) // claimableAt + ttl
		if _, err := e.s.ExpireDue(e.ctx); err != nil {
			e.Fatal(err)
		}
		e.wantState("a", sitestore.StateExpired)
	}},
	{"a terminal job cannot be adopted", func(e *env) {
		e.create(job("a", "alice"))
		e.complete(e.claimOne("r1", "alice"), "r1", okOutcome())
		if _, ok, _ := e.s.Adopt(e.ctx, sitestore.AdoptInput{JobID: "a", LeaseID: "relay", ExpiresAt: e.now() + 1000}); ok {
			e.Fatal("a finished job was adopted")
		}
	}},
	{"claimedBy lists exactly the runner's held jobs", func(e *env) {
		e.create(job("a", "alice"))
		e.create(job("b", "alice"))
		e.create(job("c", "alice"))
		e.claimOne("r1", "alice")
		e.claimOne("r2", "alice")
		mine, err := e.s.ClaimedBy(e.ctx, "r1")
		if err != nil || len(mine) != 1 || mine[0].Lease.RunnerID != "r1" {
			e.Fatalf("claimedBy r1: %v %v", ids(mine), err)
		}
	}},
}
