package sitestoretest

import (
	"testing"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

func createCases() []testCase {
	return []testCase{
		{"a new job is queued, private by default, claimable now with the default TTL", func(t *testing.T, e Env) {
			j := e.create(t, job("a", "alice"))
			if j.State != sitestore.StateQueued || j.Audience != protocol.AudiencePrivate ||
				j.ClaimableAt != e.now() || j.CreatedAt != e.now() || j.TTLMs != sitestore.DefaultTTLMs ||
				j.Attempts != 0 || j.Lease != nil || len(j.RefusedBy) != 0 {
				t.Fatalf("new job: %+v", j)
			}
			if got := e.get(t, "a"); got.Envelope != envelope("a") || got.Owner != "alice" {
				t.Fatalf("stored job: %+v", got)
			}
		}},
		{"create is idempotent by id: a second create returns the stored job unchanged", func(t *testing.T, e Env) {
			e.create(t, job("a", "alice"))
			claimed := e.claimOne(t, "r1", "alice")
			e.advance(1000)
			in := job("a", "mallory")
			in.TTLMs = 1
			again := e.create(t, in)
			if again.Owner != "alice" || again.State != sitestore.StateClaimed || again.Lease.ID != claimed.Lease.ID {
				t.Fatalf("replayed create changed the job: %+v", again)
			}
		}},
		{"a job whose dependency is unfinished or unknown is blocked, with no TTL clock", func(t *testing.T, e Env) {
			e.create(t, job("dep", "alice"))
			if j := e.create(t, job("waits", "alice", "dep")); j.ClaimableAt != 0 {
				t.Fatalf("dependent of a queued job is claimable at %d", j.ClaimableAt)
			}
			if j := e.create(t, job("orphan", "alice", "nobody")); j.ClaimableAt != 0 {
				t.Fatalf("dependent of an unknown job is claimable at %d", j.ClaimableAt)
			}
		}},
		{"a job whose dependencies are all ok is claimable at once", func(t *testing.T, e Env) {
			e.create(t, job("dep", "alice"))
			e.complete(t, e.claimOne(t, "r1", "alice"), "r1", okOutcome())
			if j := e.create(t, job("next", "alice", "dep")); j.ClaimableAt != e.now() {
				t.Fatalf("dependent of an ok job: claimableAt %d", j.ClaimableAt)
			}
		}},
		{"the roster, purpose, deadline and TTL are kept as given", func(t *testing.T, e Env) {
			in := job("a", "alice")
			in.Audience = protocol.AudienceTeam
			in.AudienceAllow = []string{"bob"}
			in.Purpose = "summaries"
			in.DeadlineAt = e.now() + 5000
			in.TTLMs = 700
			e.create(t, in)
			j := e.get(t, "a")
			if !equal(j.AudienceAllow, []string{"bob"}) || j.Purpose != "summaries" || j.DeadlineAt != in.DeadlineAt || j.TTLMs != 700 {
				t.Fatalf("stored: %+v", j)
			}
			if e.create(t, job("b", "alice")); e.get(t, "b").AudienceAllow != nil {
				t.Fatal("an unset roster reads back as set")
			}
		}},
		{"an unknown job reads as absent", func(t *testing.T, e Env) {
			if _, found, err := e.Store.Get(ctx, "nope"); err != nil || found {
				t.Fatalf("found=%v err=%v", found, err)
			}
		}},
	}
}
