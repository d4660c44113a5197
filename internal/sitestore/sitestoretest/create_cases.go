package sitestoretest

import (
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

var createCases = []testCase{
	{"a new job is queued, private by default, claimable now with the default TTL", func(e *env) {
		j := e.create(job("a", "alice"))
		if j.State != sitestore.StateQueued || j.Audience != protocol.AudiencePrivate ||
			j.ClaimableAt != e.now() || j.CreatedAt != e.now() || j.TTLMs != sitestore.DefaultTTLMs ||
			j.Attempts != 0 || j.Lease != nil || len(j.RefusedBy) != 0 {
			e.Fatalf("new job: %+v", j)
		}
		if got := e.get("a"); got.Envelope != envelope("a") || got.Owner != "alice" {
			e.Fatalf("stored job: %+v", got)
		}
	}},
	{"create is idempotent by id: a second create returns the stored job unchanged", func(e *env) {
		e.create(job("a", "alice"))
		claimed := e.claimOne("r1", "alice")
		e.advance(1000)
		in := job("a", "mallory")
		in.TTLMs = 1
		again := e.create(in)
		if again.Owner != "alice" || again.State != sitestore.StateClaimed || again.Lease.ID != claimed.Lease.ID {
			e.Fatalf("replayed create changed the job: %+v", again)
		}
	}},
	{"a job whose dependency is unfinished or unknown is blocked, with no TTL clock", func(e *env) {
		e.create(job("dep", "alice"))
		if j := e.create(job("waits", "alice", "dep")); j.ClaimableAt != 0 {
			e.Fatalf("dependent of a queued job is claimable at %d", j.ClaimableAt)
		}
		if j := e.create(job("orphan", "alice", "nobody")); j.ClaimableAt != 0 {
			e.Fatalf("dependent of an unknown job is claimable at %d", j.ClaimableAt)
		}
	}},
	{"a job whose dependencies are all ok is claimable at once", func(e *env) {
		e.create(job("dep", "alice"))
		e.complete(e.claimOne("r1", "alice"), "r1", okOutcome())
		if j := e.create(job("next", "alice", "dep")); j.ClaimableAt != e.now() {
			e.Fatalf("dependent of an ok job: claimableAt %d", j.ClaimableAt)
		}
	}},
	{"the roster, purpose, deadline and TTL are kept as given", func(e *env) {
		in := job("a", "alice")
		in.Audience = protocol.AudienceTeam
		in.AudienceAllow = []string{"bob"}
		in.Purpose = "summaries"
		in.DeadlineAt = e.now() + 5000
		in.TTLMs = 700
		e.create(in)
		j := e.get("a")
		if !equal(j.AudienceAllow, []string{"bob"}) || j.Purpose != "summaries" || j.DeadlineAt != in.DeadlineAt || j.TTLMs != 700 {
			e.Fatalf("stored: %+v", j)
		}
		if e.create(job("b", "alice")); e.get("b").AudienceAllow != nil {
			e.Fatal("an unset roster reads back as set")
		}
	}},
	{"an unknown job reads as absent", func(e *env) {
		if _, found, err := e.s.Get(e.ctx, "nope"); err != nil || found {
			e.Fatalf("found=%v err=%v", found, err)
		}
	}},
}
